"""Memory-leak check: does RSS grow with the iteration count of the timed loop?

RSS is read at every stop-rule check (off the hot path), giving (iterations, bytes)
pairs. A Theil-Sen slope is robust to a one-off spike; a leak is flagged when the slope's
whole confidence interval is above the harness's own growth (it keeps every sample) AND
the growth matters: at least 1 KiB per iteration, or 1% of the starting RSS over the run,
and at least 4 MiB in all (less is within what allocators do on their own: a clean eager
resnet18 step was seen growing 0.5 MiB over a few hundred iterations on a busy machine).
Below 4 MiB of total growth no test is needed, which also spares the worker importing
scipy.stats (~0.5 s) in the common case.

A leak must also persist: the later half of the loop (by iterations), fitted on its own,
must pass the same test. Allocators warm up in steps, not slopes: eager resnet18 (b8,
64 px, 2 threads, an AVX2 EPYC) kept 1.6-4 MiB more RSS from one stop-rule check on (most
often the first after the minimum time, ~30 iterations in; in longer loops at 97 or 175,
or never), flat otherwise (alone in a loop of its own, RSS grew 140 KiB from iteration 2
to 2500, the loop's own list included); with glibc's mmap threshold
fixed (MALLOC_MMAP_THRESHOLD_) there was no step at all: the heap's high-water mark, not a
leak. A 4 MiB step at iteration 33, flat to iteration 190-240, fits 19-24 KiB/iter over
the whole loop (the flag `make demo` showed); inside the later half a step leaves flat
pairs of readings, so the interval there reaches zero, while a leak's does not.

A leak one repetition saw is evidence, not a finding: a view shows it only when repetitions
agree (`confirmed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MIN_POINTS = 5
# Readings in the later half: the timed loop's batches grow by a quarter, so a loop that
# doubles its count after its midpoint has 3-4 readings there.
MIN_LATE_POINTS = 3
MIN_BYTES_PER_ITER = 1024
MIN_GROWTH_FRACTION = 0.01
# The harness itself keeps every sample (a list slot + an int object, ~36 B measured):
# growth up to this much per iteration is ours, not the backend's.
HARNESS_BYTES_PER_ITER = 64
MIN_GROWTH_BYTES = 4 * 2**20
# Repetitions that must flag a leak before a view shows it.
MIN_CONFIRMING = 2


def check_leak(iterations: Sequence[int], rss_bytes: Sequence[int]) -> dict[str, Any] | None:
    """{'bytes_per_iter', 'low', 'high', 'growth_bytes', 'leak'} over the whole loop, and
    'late_bytes_per_iter', 'late_low', 'late_high' over its later half (None where the
    whole loop grew too little to test, or the later half has too few readings);
    None with too few points."""
    if len(iterations) != len(rss_bytes) or len(set(iterations)) < MIN_POINTS:
        return None
    if max(rss_bytes) - rss_bytes[0] < MIN_GROWTH_BYTES:
        import numpy as np

        slope = float(np.polyfit(iterations, rss_bytes, 1)[0])
        growth = slope * (iterations[-1] - iterations[0])
        return {
            "bytes_per_iter": slope,
            "low": None,
            "high": None,
            "growth_bytes": growth,
            "leak": False,
            **dict.fromkeys(("late_bytes_per_iter", "late_low", "late_high")),
        }
    from scipy.stats import theilslopes

    slope, _, low, high = theilslopes(rss_bytes, iterations, alpha=0.95)
    span = iterations[-1] - iterations[0]
    leak = _grows(slope, low, span, rss_bytes[0])
    middle = (iterations[0] + iterations[-1]) / 2
    late = [(i, r) for i, r in zip(iterations, rss_bytes, strict=True) if i >= middle]
    late_slope = late_low = late_high = None
    if len({i for i, _ in late}) >= MIN_LATE_POINTS:
        late_iters, late_rss = zip(*late, strict=True)
        late_slope, _, late_low, late_high = theilslopes(late_rss, late_iters, alpha=0.95)
        # The same test at the later half's rate, over the whole span: had the loop run
        # at that rate throughout, would it have been flagged?
        leak = leak and _grows(late_slope, late_low, span, rss_bytes[0])
    else:
        leak = False  # the loop is too short to tell a warm-up step from a leak
    return {
        "bytes_per_iter": float(slope),
        "low": float(low),
        "high": float(high),
        "growth_bytes": float(slope * span),
        "leak": bool(leak),
        "late_bytes_per_iter": _float(late_slope),
        "late_low": _float(late_low),
        "late_high": _float(late_high),
    }


def _grows(slope: float, low: float, span: int, start_bytes: int) -> bool:
    """Whether a fitted slope is a leak: its interval above the harness's own growth, and
    enough growth over `span` iterations to matter (the module docstring's thresholds)."""
    excess = slope - HARNESS_BYTES_PER_ITER
    big = (
        excess >= MIN_BYTES_PER_ITER or excess * span >= MIN_GROWTH_FRACTION * start_bytes
    ) and excess * span >= MIN_GROWTH_BYTES
    return bool(low > HARNESS_BYTES_PER_ITER and big)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def confirmed(checks: Sequence[Mapping[str, Any] | None]) -> float | None:
    """A cell's leak, from its repetitions' `check_leak` results: bytes per iteration when
    at least MIN_CONFIRMING repetitions flag it and they are most of those checked, else
    None. The rate is the least any flagging repetition grew by (its later half's where
    stored): what they all agree on."""
    checked = [c for c in checks if c is not None]
    flagged = [c for c in checked if c.get("leak")]
    if len(flagged) < MIN_CONFIRMING or 2 * len(flagged) <= len(checked):
        return None
    rates = [c.get("late_bytes_per_iter") or c["bytes_per_iter"] for c in flagged]
    return float(min(rates))


def suspected(checks: Sequence[Mapping[str, Any] | None]) -> float | None:
    """A leak one repetition alone saw, when it is the only one checked: its rate (later
    half's where stored), shown as unconfirmed, so a default one-repetition run does not
    hide a real leak; None when there are more repetitions (`confirmed` decides) or no
    flag."""
    checked = [c for c in checks if c is not None]
    if len(checked) != 1 or not checked[0].get("leak"):
        return None
    return float(checked[0].get("late_bytes_per_iter") or checked[0]["bytes_per_iter"])
