"""Change points in a metric's history: binary segmentation with a significance test.

Split the series where a two-segment fit reduces the squared error most, keep the split
when a pooled-variance t-test between the two sides is significant after a Bonferroni
correction for the number of candidate split points (the best split is chosen with
hindsight, so an uncorrected test would find a step in pure noise), then recurse into
both halves. Runs of one machine share a noise level, hence the pooled variance.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import ttest_ind


@dataclass(frozen=True)
class Step:
    index: int  # first point of the new level
    before: float  # mean of the segment before
    after: float  # mean of the segment after
    p_value: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1.0 if self.before else float("inf")


def _best_split(y: np.ndarray, min_size: int) -> int | None:
    n = len(y)
    if n < 2 * min_size:
        return None
    cs, cs2 = np.cumsum(y), np.cumsum(y * y)
    ks = np.arange(min_size, n - min_size + 1)
    left_n, right_n = ks, n - ks
    left_s, right_s = cs[ks - 1], cs[-1] - cs[ks - 1]
    # Total SSE of the two-mean fit = sum(y^2) - sum_left^2/n_l - sum_right^2/n_r.
    sse = cs2[-1] - left_s**2 / left_n - right_s**2 / right_n
    return int(ks[int(np.argmin(sse))])


def detect_steps(
    values: Sequence[float], alpha: float = 0.01, min_size: int = 2, min_change: float = 0.0
) -> list[Step]:
    """Steps in `values`, in order; `min_change` ignores significant but tiny steps."""
    y = np.asarray(values, dtype=float)
    steps: list[Step] = []

    def recurse(lo: int, hi: int) -> None:
        seg = y[lo:hi]
        k = _best_split(seg, min_size)
        if k is None:
            return
        a, b = seg[:k], seg[k:]
        if np.ptp(seg) == 0:
            return
        with warnings.catch_warnings():  # near-constant segments: scipy warns, p is still right
            warnings.simplefilter("ignore", RuntimeWarning)
            p = float(ttest_ind(a, b, equal_var=True).pvalue)
        candidates = len(seg) - 2 * min_size + 1
        before, after = float(a.mean()), float(b.mean())
        big = abs(after - before) >= min_change * abs(before)
        if np.isnan(p) or p * candidates > alpha or not big:
            return
        recurse(lo, lo + k)
        steps.append(Step(lo + k, before, after, min(1.0, p * candidates)))
        recurse(lo + k, hi)

    recurse(0, len(y))
    # Report levels of the final segmentation, not of the split that found each step.
    bounds = [0, *(s.index for s in steps), len(y)]
    means = [float(y[a:b].mean()) for a, b in zip(bounds, bounds[1:], strict=False)]
    return [Step(s.index, means[i], means[i + 1], s.p_value) for i, s in enumerate(steps)]
