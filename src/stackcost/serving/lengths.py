"""How long each request is: its prompt and output lengths in tokens.

`fixed` gives every request the cell's --prompt-len and --new-tokens. `uniform:LO-HI`
draws each request's two lengths uniformly between LO and HI times those (seeded), as
GuideLLM's and vLLM's random datasets spread them. `file:PATH` reads one
`prompt_len,new_tokens` pair a line (a trace of real requests) and cycles through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMS = "fixed, uniform:LO-HI (fractions of --prompt-len/--new-tokens, e.g. uniform:0.5-1.5) or file:PATH (prompt_len,new_tokens a line)"


@dataclass(frozen=True)
class Lengths:
    prompt: int
    output: int


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
        if not 0 < bounds[0] <= bounds[1]:
            raise ValueError(f"lengths {spec!r}: uniform needs 0 < LO <= HI; allowed: {FORMS}")
        return "uniform", bounds
    if kind == "file" and arg:
        path = Path(arg)
        if not path.is_file():
            raise ValueError(f"lengths {spec!r}: no such file {arg}; allowed: {FORMS}")
        return "file", path
    raise ValueError(f"lengths {spec!r} is not a form of lengths; allowed: {FORMS}")


def read_trace(path: Path) -> list[Lengths]:
    """A file's `prompt_len,new_tokens` lines (blank lines and # comments skipped)."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            prompt, output = (int(v) for v in line.split(","))
        except ValueError:
            raise ValueError(f"{path}:{number}: {line!r} is not prompt_len,new_tokens") from None
        if prompt < 1 or output < 1:
            raise ValueError(f"{path}:{number}: lengths must be at least 1, not {line!r}")
        out.append(Lengths(prompt, output))
    if not out:
        raise ValueError(f"{path}: no prompt_len,new_tokens line in it")
    return out


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
