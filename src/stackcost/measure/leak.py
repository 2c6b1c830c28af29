"""Memory-leak check: does RSS grow with the iteration count of the timed loop?

RSS is read at every stop-rule check (off the hot path), giving (iterations, bytes)
pairs. A Theil-Sen slope is robust to the one-off jumps of an allocator growing its
arenas; a leak is flagged when the slope's whole confidence interval is above the harness's
own growth (it keeps every sample) AND
the growth matters: at least 1 KiB per iteration, or 1% of the starting RSS over the run,
and at least 4 MiB in all (less is within what allocators do on their own: a clean eager
resnet18 step was seen growing 0.5 MiB over a few hundred iterations on a busy machine).
Below 4 MiB of total growth no test is needed, which also spares the worker importing
scipy.stats (~0.5 s) in the common case.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MIN_POINTS = 5
MIN_BYTES_PER_ITER = 1024
MIN_GROWTH_FRACTION = 0.01
# The harness itself keeps every sample (a list slot + an int object, ~36 B measured):
# growth up to this much per iteration is ours, not the backend's.
HARNESS_BYTES_PER_ITER = 64
MIN_GROWTH_BYTES = 4 * 2**20


def check_leak(iterations: Sequence[int], rss_bytes: Sequence[int]) -> dict[str, Any] | None:
    """{'bytes_per_iter', 'low', 'high', 'growth_bytes', 'leak'}; None with too few points."""
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
        }
    from scipy.stats import theilslopes

    slope, _, low, high = theilslopes(rss_bytes, iterations, alpha=0.95)
    span = iterations[-1] - iterations[0]
    growth = slope * span
    excess = slope - HARNESS_BYTES_PER_ITER
    big = (
        excess >= MIN_BYTES_PER_ITER or excess * span >= MIN_GROWTH_FRACTION * rss_bytes[0]
    ) and excess * span >= MIN_GROWTH_BYTES
    return {
        "bytes_per_iter": float(slope),
        "low": float(low),
        "high": float(high),
        "growth_bytes": float(growth),
        "leak": bool(low > HARNESS_BYTES_PER_ITER and big),
    }
