"""How long each request is: its prompt and output lengths in tokens.

`fixed` gives every request the cell's --prompt-len and --new-tokens. `uniform:LO-HI`
draws each request's two lengths uniformly between LO and HI times those (seeded), as
GuideLLM's and vLLM's random datasets spread them. `file:PATH` reads one
`prompt_len,new_tokens` pair a line (a trace of real requests) and cycles through it.

A form is checked in full where it enters (spec/serving.py), with the model's positions:
`longest` is the most tokens any request of it can hold, and a trace is read whole, within
size and line limits, its first bad line named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMS = "fixed, uniform:LO-HI (fractions of --prompt-len/--new-tokens, e.g. uniform:0.5-1.5) or file:PATH (prompt_len,new_tokens a line)"
# A trace is read whole before any worker starts (and again in each): bounded, so that a
# wrong path (a disk image, a log) is refused at once rather than read for minutes.
MAX_TRACE_BYTES = 64 * 2**20
MAX_TRACE_LINES = 1_000_000


@dataclass(frozen=True)
class Lengths:
    prompt: int
    output: int

    @property
    def total(self) -> int:
        return self.prompt + self.output


def parse(spec: str) -> tuple[str, tuple[float, float] | Path | None]:
    """`spec`'s form and argument; ValueError naming the value and the forms allowed."""
    kind, _, arg = spec.partition(":")
    if kind == "fixed" and not arg:
        return "fixed", None
    if kind == "uniform":
        lo, _, hi = arg.partition("-")
        try:
            bounds = (float(lo), float(hi))
        except ValueError:
            bounds = (0.0, -1.0)
        if not (all(math.isfinite(b) for b in bounds) and 0 < bounds[0] <= bounds[1]):
            raise ValueError(
                f"lengths {spec[:60]!r}: uniform needs finite 0 < LO <= HI; allowed: {FORMS}"
            )
        return "uniform", bounds
    if kind == "file" and arg:
        path = Path(arg)
        if not path.is_file():
            raise ValueError(f"lengths {spec[:60]!r}: no such file {arg[:60]}; allowed: {FORMS}")
        return "file", path
    raise ValueError(f"lengths {spec[:60]!r} is not a form of lengths; allowed: {FORMS}")


def read_trace(path: Path) -> list[Lengths]:
    """A file's `prompt_len,new_tokens` lines (blank lines and # comments skipped); a
    ValueError naming the file and its first bad line, or the limit it passes."""
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise ValueError(
            f"{path}: {size:,} bytes is more than a lengths file may hold "
            f"({MAX_TRACE_BYTES:,}; one prompt_len,new_tokens a line)"
        )
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not text (byte {exc.start} is not UTF-8)") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if number > MAX_TRACE_LINES:
            raise ValueError(f"{path}: more than {MAX_TRACE_LINES:,} lines (the most allowed)")
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            prompt, output = (int(v) for v in line.split(","))
        except ValueError:
            raise ValueError(
                f"{path}:{number}: {line[:40]!r} is not prompt_len,new_tokens"
            ) from None
        if prompt < 1 or output < 1:
            raise ValueError(f"{path}:{number}: lengths must be at least 1, not {line[:40]!r}")
        out.append(Lengths(prompt, output))
    if not out:
        raise ValueError(f"{path}: no prompt_len,new_tokens line in it")
    return out


@dataclass(frozen=True)
class Longest:
    """The most any request of a form may ask: an engine's context and the model's
    positions must hold `tokens`, and its output limit `output`."""

    prompt: int
    output: int
    tokens: int  # of one request, prompt and output together


def longest(spec: str, prompt_len: int, new_tokens: int) -> Longest:
    """The longest request `spec` may draw around the cell's `prompt_len`/`new_tokens`."""
    kind, arg = parse(spec)
    if kind == "fixed":
        return Longest(prompt_len, new_tokens, prompt_len + new_tokens)
    if kind == "file":
        trace = read_trace(arg)  # type: ignore[arg-type]
        return Longest(
            max(t.prompt for t in trace),
            max(t.output for t in trace),
            max(t.total for t in trace),
        )
    _, hi = arg  # type: ignore[misc]
    prompt, output = max(1, round(prompt_len * hi)), max(1, round(new_tokens * hi))
    return Longest(prompt, output, prompt + output)


def draw(spec: str, prompt_len: int, new_tokens: int, count: int, seed: int) -> list[Lengths]:
    """`count` requests' lengths by `spec`, around the cell's `prompt_len` and `new_tokens`."""
    kind, arg = parse(spec)
    if kind == "fixed":
        return [Lengths(prompt_len, new_tokens)] * count
    if kind == "file":
        trace = read_trace(arg)  # type: ignore[arg-type]
        return [trace[i % len(trace)] for i in range(count)]
    lo, hi = arg  # type: ignore[misc]
    rng = np.random.default_rng(seed)
    prompts = np.maximum(1, np.rint(prompt_len * rng.uniform(lo, hi, count))).astype(int)
    outputs = np.maximum(1, np.rint(new_tokens * rng.uniform(lo, hi, count))).astype(int)
    return [Lengths(int(p), int(o)) for p, o in zip(prompts, outputs, strict=True)]
