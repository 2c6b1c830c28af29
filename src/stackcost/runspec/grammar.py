"""The grammar of list-valued options: ranges like 8..1024x2, lists, shapes, key=value pairs.

Every check here produces a one-line message that names the bad value and what is allowed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from stackcost.clip import shown
from stackcost.env import ENV_NAME
from stackcost.errors import SpecError
from stackcost.scenarios.settings import SCENARIO_CHOICES, SCENARIOS

# Bounds checked before anything is expanded or written (docs/refusals.md).
SQLITE_INT_MAX = 2**63 - 1  # every integer lands in a SQLite INTEGER column
MAX_AXIS_VALUES = 10_000  # values one axis (a range, a list) may expand to
MAX_CELLS = 100_000  # cells one spec may expand to
MAX_REPEATS = 1_000  # independent processes per cell
# A head or an input this wide is a typo, and its weights alone would not fit: ImageNet-21k
# has 21,841 classes, hyperspectral images a few hundred bands.
MAX_CLASSES = 100_000
MAX_CHANNELS = 1_024


def split_list(text: str, what: str, example: str) -> list[str]:
    """A comma list's items, stripped. An empty item (a doubled, leading or trailing comma)
    is refused where it is: dropped, it would run another grid than the one typed."""
    items = [p.strip() for p in str(text).split(",")]
    for position, item in enumerate(items, 1):
        if not item:
            given = [i for i in items if i]
            such = ",".join(given) if len(given) > 1 else example
            raise SpecError(
                f"{what} {shown(text, 40)}: empty item at position {position}; "
                f"give a comma-separated list such as {such}"
            )
    return items


def parse_range(text: str, what: str) -> list[int]:
    """'8..1024x2' (geometric), '32..224+32' (arithmetic) or '1..4' (step 1), inclusive."""
    match = re.fullmatch(r"\s*(\d+)\s*\.\.\s*(\d+)\s*(?:([x+])\s*(\d+))?\s*", text)
    if not match:
        raise SpecError(
            f"{what} range {text!r} is malformed (expected START..STOP, START..STOPxFACTOR "
            "or START..STOP+STEP, e.g. 8..1024x2)"
        )
    try:
        start, stop = int(match[1]), int(match[2])
        op, step = match[3] or "+", int(match[4] or 1)
    except ValueError:  # more digits than int() will read (4300)
        raise SpecError(f"{what} range {text[:40]!r}... has numbers too long to read") from None
    for value in (start, stop, step):
        check_int(value, what)
    if start <= 0:
        raise SpecError(f"{what} range {text!r} must start at a positive integer")
    if start > stop:
        raise SpecError(f"{what} range {text!r} is reversed: {start} > {stop}")
    if (op == "x" and step < 2) or step < 1:
        raise SpecError(
            f"{what} range {text!r}: the {'factor' if op == 'x' else 'step'} "
            f"must be {'>= 2' if op == 'x' else '>= 1'}"
        )
    # Counted before the list exists. A geometric range of SQLite-sized integers has at
    # most 64 values; an arithmetic one can have billions.
    count = (stop - start) // step + 1
    if op == "+" and count > MAX_AXIS_VALUES:
        raise SpecError(
            f"{what} range {text!r} expands to {count:,} values (at most {MAX_AXIS_VALUES:,})"
        )
    values, v = [], start
    while v <= stop:
        values.append(v)
        v = v * step if op == "x" else v + step
    return values


def check_int(value: int, what: str) -> int:
    """Refuse integers a SQLite INTEGER column cannot hold."""
    if abs(value) > SQLITE_INT_MAX:
        raise SpecError(f"{what} {value} is too large (at most {SQLITE_INT_MAX})")
    return value


def check_widths(num_classes: int | None, in_channels: int | None) -> None:
    """A model's head and input widths, bounded before any weight is allocated."""
    for flag, value, most in (
        ("--num-classes", num_classes, MAX_CLASSES),
        ("--in-channels", in_channels, MAX_CHANNELS),
    ):
        if value is not None and not 0 <= value <= most:
            raise SpecError(f"{flag} {value} is out of range (allowed: 1..{most:,})")


def parse_positive_ints(text: str, what: str) -> list[int]:
    """A comma list of positive integers and ranges: '1,8', '8..1024x2', '1,2,16..64x2'."""
    values: list[int] = []
    for part in split_list(text, what, "1,8"):
        if ".." in part:
            values.extend(parse_range(part, what))
            if len(values) > MAX_AXIS_VALUES:
                raise SpecError(f"{what} list has more than {MAX_AXIS_VALUES:,} values")
            continue
        try:
            value = int(part)
        except ValueError:
            raise SpecError(
                f"{what} {part[:40]!r} is not an integer (expected e.g. 1,8,16)"
            ) from None
        if value <= 0:
            raise SpecError(f"{what} {value} must be a positive integer (>= 1)")
        values.append(check_int(value, what))
        if len(values) > MAX_AXIS_VALUES:
            raise SpecError(f"{what} list has more than {MAX_AXIS_VALUES:,} values")
    return values


def parse_float(
    text: str | float,
    what: str,
    low: float = 0.0,
    high: float = math.inf,
    *,
    low_closed: bool = False,
    high_closed: bool = False,
) -> float:
    """A finite number in the interval from `low` to `high` (open ends unless closed):
    NaN passes no comparison and infinity no bound, so both are refused here, once."""
    if high == math.inf:
        allowed = f"{'>=' if low_closed else '>'} {low:g}"
    else:
        allowed = f"in {'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}"
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise SpecError(f"{what} {shown(text)} is not a number (allowed: {allowed})") from None
    inside = (value >= low if low_closed else value > low) and (
        value <= high if high_closed else value < high
    )
    if not (math.isfinite(value) and inside):
        raise SpecError(f"{what} {shown(text)} must be a finite number {allowed}")
    return value


def parse_choices(text: str, what: str, allowed: tuple[str, ...]) -> list[str]:
    values = split_list(text, what, ",".join(allowed[:2]))
    for value in values:
        if value not in allowed:
            raise SpecError(f"unknown {what} {value!r} (allowed: {', '.join(allowed)})")
    return values


def parse_scenarios(text: str) -> list[str]:
    """'single-stream,server' -> names; 'all' is every LoadGen scenario."""
    values = split_list(text, "--scenario", "timed-loop,server")
    if values == ["all"]:
        return list(SCENARIOS)
    for value in values:
        if value not in SCENARIO_CHOICES:
            raise SpecError(
                f"unknown scenario {value[:40]!r} (allowed: {', '.join(SCENARIO_CHOICES)}, or all)"
            )
    return list(dict.fromkeys(values))


def parse_shape(text: str) -> tuple[int, ...]:
    return tuple(parse_positive_ints(text, "input shape dimension"))


def parse_config(items: list[str]) -> dict[str, int | float | bool | str]:
    """'key=value' config overrides; values read as JSON where they are (4, 0.1, true)."""
    import json

    out: dict[str, int | float | bool | str] = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not (eq and re.fullmatch(r"[A-Za-z_]\w*", key.strip())):
            raise SpecError(
                f"config {shown(item)} must look like key=value, e.g. num_hidden_layers=4"
            )
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if not isinstance(value, (int, float, bool, str)) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise SpecError(
                f"config {key.strip()}={shown(text)}: give a number, true/false or a word"
            )
        if isinstance(value, int) and not isinstance(value, bool):
            check_int(value, f"config {key.strip()}")
        out[key.strip()] = value
    return out


def parse_options(items: list[str]) -> dict[str, dict[str, str]]:
    """'backend.key=value' pairs into {backend: {key: value}}. The key is after the last
    dot before '=': a backend's own name may hold dots (llama.cpp, package.module:Class)."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        name, eq, value = item.partition("=")
        backend, dot, key = name.rpartition(".")
        if not (eq and dot and backend and key):
            raise SpecError(f"option {item!r} must look like backend.key=value")
        out.setdefault(backend, {})[key] = value
    return out


def check_env_names(names: Iterable[str]) -> str | None:
    """Why a --inherit-env name is not a variable name; None when all are."""
    for name in names:
        if not ENV_NAME.fullmatch(name):
            return (
                f"--inherit-env {name!r} is not an environment variable name "
                "(letters, digits and _, not starting with a digit)"
            )
    return None
