"""Numbers with units, formatted for people."""

from __future__ import annotations

import math


def ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value >= 1:
        return f"{value:.2f} ms"
    return f"{value * 1000:.1f} µs"


def mib(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**20:,.0f} MiB"


def rate(value: float | None, unit: str = "/s") -> str:
    if value is None:
        return "—"
    return f"{value:,.1f} {unit}" if value < 1000 else f"{value:,.0f} {unit}"


def sci(value: float | None) -> str:
    return "—" if value is None else f"{value:.1e}"


def num(value: float | None, digits: int = 4) -> str:
    """A bare number for a column whose header carries the unit; '—' when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:,.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"


def rel_err(value: float | None) -> str:
    """A relative error in scientific notation ('2.1e-07'), 'inf', or '—' where none."""
    if value is None or math.isnan(value):
        return "—"
    return "inf" if math.isinf(value) else f"{value:.1e}"
