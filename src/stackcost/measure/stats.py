"""Summary statistics of per-iteration samples.

The median's confidence interval comes from order statistics with scipy.special's
binomial distribution: the same interval as scipy.stats.quantile_test (the tests check
that), without importing scipy.stats, which costs every worker process ~0.5 s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy.special import bdtr, bdtrik


class Stats(BaseModel):
    """Per-iteration latency summary, in milliseconds."""

    # NaN (no CI from too few samples) must survive the worker's JSON, not become null.
    model_config = ConfigDict(ser_json_inf_nan="constants")

    n: int
    median_ms: float
    mean_ms: float
    iqr_ms: float
    p90_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    ci_low_ms: float  # distribution-free confidence interval of the median
    ci_high_ms: float
    cv: float  # coefficient of variation (std / mean), unitless
    confidence: float = 0.95

    @property
    def ci_half_width_rel(self) -> float:
        """Half the CI width relative to the median: the stop rule's target."""
        if math.isnan(self.ci_low_ms) or math.isnan(self.ci_high_ms) or self.median_ms == 0:
            return math.inf
        return (self.ci_high_ms - self.ci_low_ms) / 2 / self.median_ms


def median_ci(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """CI of the median from order statistics (binomial; no normality assumed).

    The interval is [x(k+1), x(n-k)] for the largest k with P(Bin(n, 1/2) <= k) <= a/2.
    NaN when there are too few samples for the requested confidence (n < 6 at 95%).
    """
    n = int(x.size)
    tail = (1 - confidence) / 2
    k = int(np.floor(bdtrik(tail, n, 0.5))) if n else -1
    while k >= 0 and bdtr(k, n, 0.5) > tail:  # bdtrik is continuous: settle on integers
        k -= 1
    while k + 1 < n and bdtr(k + 1, n, 0.5) <= tail:
        k += 1
    if k < 0:
        return math.nan, math.nan
    ordered = np.sort(x)
    return float(ordered[k]), float(ordered[n - 1 - k])


def summarize(samples_ns: Sequence[int] | np.ndarray, confidence: float = 0.95) -> Stats:
    x = np.asarray(samples_ns, dtype=np.float64) / 1e6
    if x.size == 0:
        raise ValueError("no samples to summarize")
    low, high = median_ci(x, confidence)
    q25, q50, q75, q90, q99 = np.percentile(x, [25, 50, 75, 90, 99])
    mean = float(np.mean(x))
    return Stats(
        n=int(x.size),
        median_ms=float(q50),
        mean_ms=mean,
        iqr_ms=float(q75 - q25),
        p90_ms=float(q90),
        p99_ms=float(q99),
        min_ms=float(np.min(x)),
        max_ms=float(np.max(x)),
        ci_low_ms=low,
        ci_high_ms=high,
        cv=float(np.std(x) / mean) if mean > 0 else math.nan,
        confidence=confidence,
    )
