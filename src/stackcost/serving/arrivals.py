"""When requests are sent: an open-loop schedule, fixed before the first request goes out,
so a slow engine cannot slow the arrivals down (a closed loop would hide its queue).

Poisson arrivals have exponential gaps (vLLM's benchmark_serving and GuideLLM's
"poisson"); constant arrivals have equal gaps. A rate of infinity sends every request at
once: the sweep's maximum-throughput point.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

Process = Literal["poisson", "constant"]
PROCESSES: tuple[Process, ...] = ("poisson", "constant")


def schedule(rate: float, count: int, process: Process, seed: int) -> np.ndarray:
    """Send offsets in seconds from the start, one per request, non-decreasing; the first
    request goes at 0. `rate` in requests/s (math.inf: all at once)."""
    if count < 1:
        raise ValueError(f"a schedule needs at least one request, not {count}")
    if not rate > 0:  # also catches NaN
        raise ValueError(f"request rate {rate!r} must be a positive number of requests/s")
    if process not in PROCESSES:
        raise ValueError(f"arrival process {process!r} is not one of {', '.join(PROCESSES)}")
    if math.isinf(rate):
        return np.zeros(count)
    if process == "constant":
        return np.arange(count) / rate
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])
