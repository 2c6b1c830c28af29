"""Summary statistics of per-iteration samples, and of a cell's repetitions.

Within one repetition (one process), the median's confidence interval comes from order
statistics with scipy.special's binomial distribution: the same interval as
scipy.stats.quantile_test (the tests check that), without importing scipy.stats, which
costs every worker process ~0.5 s. That interval is within-process: it is what the stop
rule reads, not the cell's uncertainty.

Across repetitions (each its own process, the unit of evidence), repetition_interval gives
the cell's interval from the repetition medians, and spread_reason says when they disagree
beyond the protocol's target (the cell is then `unstable`). `spreads` says where the
variation lives: between windows of one process, or between processes (where the buffers
landed: a process's memory layout sets its speed, Mytkowicz et al. 2009).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy.special import bdtr, bdtrik, ndtr, ndtri, stdtrit


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
    # Distribution-free CI of the median of these samples. For one repetition's samples
    # it is within-process (iterations of one process are correlated): the stop rule's
    # measure, not the cell's uncertainty (repetition_interval, below).
    ci_low_ms: float
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


# -- across repetitions --------------------------------------------------------------------
#
# Iterations within one process are correlated (one memory layout, one JIT outcome, one
# clock state), so a CI over them says how well that process's median is known, not how
# well the cell's is. The repetition (a process of its own) is the unit of evidence: the
# functions below see one number per repetition, its median.


class RepetitionInterval(BaseModel):
    """The cell's CI from its repetitions' medians: a t-interval of their mean, in ms."""

    n: int  # repetitions (each one process)
    mean_ms: float  # the interval's centre: the mean of the repetition medians
    low_ms: float
    high_ms: float
    confidence: float = 0.95

    @property
    def method(self) -> str:
        return f"t-interval over {self.n} repetition medians"

    @property
    def half_width_rel(self) -> float:
        """The t half-width relative to the centre (inf when there is none): the upper
        side, since the lower one stops at zero."""
        if not math.isfinite(self.high_ms) or self.mean_ms <= 0:
            return math.inf
        return (self.high_ms - self.mean_ms) / self.mean_ms


def repetition_interval(
    medians_ms: Sequence[float], confidence: float = 0.95
) -> RepetitionInterval | None:
    """Student's t-interval for the mean of the repetition medians; None below 2 of them.

    Why t, and not a bootstrap or order statistics, at the n a benchmark affords (2..10):
    - A percentile bootstrap over n medians can only return values among them: for n = 3 its
      95% interval of the median is [min, max], which holds the true median with
      probability 1 - 2 * (1/2)**3 = 75%, and for n = 2 with 50%. It claims 95% and
      delivers far less; a hierarchical bootstrap inherits that at the repetition level.
    - The order-statistics interval used within a process needs n >= 6 at 95%.
    - Each repetition median is a median of hundreds to thousands of iterations, so its
      within-process noise is close to normal; what differs between processes (layout,
      clocks) adds to it. Under normality the t-interval's coverage is exact at every n,
      and where it is wide (t = 12.7 at n = 2, 4.3 at n = 3) that width is the truth about
      what so few processes can say.
    A latency is positive: the interval's lower end stops at 0 (which costs no coverage).
    Uses scipy.special (stdtrit), not scipy.stats, which costs a worker ~0.5 s to import.
    """
    x = np.asarray([m for m in medians_ms if math.isfinite(m)], dtype=np.float64)
    n = int(x.size)
    if n < 2:
        return None
    mean = float(np.mean(x))
    half = float(stdtrit(n - 1, (1 + confidence) / 2) * np.std(x, ddof=1) / math.sqrt(n))
    return RepetitionInterval(
        n=n, mean_ms=mean, low_ms=max(mean - half, 0.0), high_ms=mean + half, confidence=confidence
    )


@lru_cache(maxsize=256)
def normal_range_quantile(n: int, level: float = 0.95) -> float:
    """The `level` quantile of the range (max - min) of n independent standard normals.

    P(R <= w) = n * integral phi(x) * (Phi(x + w) - Phi(x))**(n - 1) dx, integrated on a
    fine grid and solved for w by bisection: 2.772 for n = 2, 3.315 for n = 3 at 95% (the
    studentized range's infinite-df quantiles, scipy.stats.studentized_range; the tests
    check that)."""
    if n < 2:
        raise ValueError("a range needs at least 2 values")
    x = np.linspace(-10.0, 10.0, 8001)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    base = ndtr(x)

    def cdf(w: float) -> float:
        return float(n * np.trapezoid(phi * (ndtr(x + w) - base) ** (n - 1), x))

    low, high = 0.0, 20.0
    for _ in range(45):  # 20 / 2**45: far below the 4 digits a limit is shown to
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < level else (low, mid)
    return (low + high) / 2


def spread_limit(n: int, target_ci: float, confidence: float = 0.95) -> float:
    """The largest relative range (max - min) / median of n repetition medians that
    repetitions agreeing to the protocol's target would show, at `confidence`.

    Derivation. The stop rule ends a repetition once its median's CI half-width is within
    target_ci of the median, i.e. that median's standard error is at most
    target_ci / z (z = 1.96 at 95%). If the repetitions measured one quantity, each to that
    precision, their medians scatter like n normals of that standard deviation, and their
    range stays below q_n * target_ci / z with probability `confidence`, q_n being the
    normal range's quantile. A wider spread is a process-to-process difference larger than
    the target the run asked for: the cell's number is not known to its target.
    At 95%: 1.41 x target for n = 2, 1.69 for 3, 1.85 for 4, 2.06 for 6, 2.28 for 10; the
    limit grows with n, as the range of more draws does. It assumes the most noise a settled
    repetition may have (its CI exactly at target); one that settled tighter makes the test
    only more lenient towards agreement in noise, never stricter.
    """
    return normal_range_quantile(n, confidence) * target_ci / float(ndtri((1 + confidence) / 2))


def relative_range(medians_ms: Sequence[float]) -> float:
    """(max - min) / median of the repetition medians; NaN without two positive ones."""
    x = np.asarray([m for m in medians_ms if math.isfinite(m)], dtype=np.float64)
    centre = float(np.median(x)) if x.size else math.nan
    if x.size < 2 or not centre > 0:
        return math.nan
    return float((x.max() - x.min()) / centre)


def spread_reason(medians_ms: Sequence[float], target_ci: float, confidence: float = 0.95) -> str:
    """Why repetitions disagree beyond the target ('' when they agree, or are fewer than 2).

    The rule: the relative range of the repetition medians exceeds spread_limit(n, ...)."""
    spread = relative_range(medians_ms)
    if math.isnan(spread):
        return ""
    n = sum(1 for m in medians_ms if math.isfinite(m))
    limit = spread_limit(n, target_ci, confidence)
    if spread <= limit:
        return ""
    return (
        f"repetition medians disagree: {n} span {min(medians_ms):.4g}–{max(medians_ms):.4g} "
        f"ms, {spread:.1%} of their median (limit {limit:.1%} for target ±{target_ci:.1%})"
    )


# A repetition's timed loop is cut into this many consecutive windows for `spreads`.
WINDOWS = 4
MIN_WINDOW_SAMPLES = 2  # a window's median needs at least this many iterations


class Spreads(BaseModel):
    """Where a cell's timing varies, each as a relative standard deviation (SD / mean):
    `within`, between consecutive windows of one process (the mean over its processes);
    `between`, between the processes' medians. Processes that differed only by the noise
    within them would scatter by about within / sqrt(windows): a `between` well above that
    is a per-process bias (its layout), which only more processes average away."""

    model_config = ConfigDict(frozen=True)

    within: float | None  # None: no repetition had WINDOWS x MIN_WINDOW_SAMPLES samples
    between: float | None  # None: fewer than two repetitions
    processes: int
    windows: int = WINDOWS

    @property
    def between_dominates(self) -> bool:
        """Whether the processes differ by more than twice what their own noise explains."""
        if self.within is None or self.between is None:
            return False
        return self.between > 2 * self.within / math.sqrt(self.windows)

    def shown(self) -> str:
        """'1.2% / 7.4% !': within / between as every view shows them, '!' where the
        processes differ by more than their own noise explains (between_dominates)."""

        def pct(value: float | None) -> str:
            return "—" if value is None else f"{value:.1%}"

        mark = " !" if self.between_dominates else ""
        return f"{pct(self.within)} / {pct(self.between)}{mark}"


def _relative_sd(values: Sequence[float]) -> float:
    x = np.asarray(values, dtype=np.float64)
    return float(np.std(x, ddof=1) / np.mean(x))


def window_spread(samples: Sequence[int], windows: int = WINDOWS) -> float | None:
    """The relative SD of one process's window medians: its samples, in timed order, cut
    into `windows` consecutive windows; None with fewer than MIN_WINDOW_SAMPLES a window."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size < windows * MIN_WINDOW_SAMPLES:
        return None
    return _relative_sd([float(np.median(w)) for w in np.array_split(x, windows)])


def between_spread(medians: Sequence[float]) -> float | None:
    """The relative SD of the processes' medians; None below two."""
    x = [m for m in medians if math.isfinite(m)]
    return _relative_sd(x) if len(x) >= 2 else None


def spreads(samples_by_process: Sequence[Sequence[int]], windows: int = WINDOWS) -> Spreads:
    """The within- and between-process spreads of a cell's repetitions, from each one's
    samples in the order they were timed (the store keeps that order)."""
    processes = [s for s in samples_by_process if len(s)]
    within = [w for s in processes if (w := window_spread(s, windows)) is not None]
    return Spreads(
        within=float(np.mean(within)) if within else None,
        between=between_spread([float(np.median(s)) for s in processes]),
        processes=len(processes),
        windows=windows,
    )


def process_spreads(values_by_process: Sequence[Sequence[float]]) -> Spreads:
    """`spreads` of processes that each report a few values already (an A/B block's bursts,
    one side's warm worker): `within` is the relative SD of one process's values (the mean
    over processes with two or more), `between` the relative SD of their medians, and
    `windows` the typical count a process reported."""
    processes = [list(v) for v in values_by_process if len(v)]
    within = [_relative_sd(v) for v in processes if len(v) >= 2]
    counts = [len(v) for v in processes]
    return Spreads(
        within=float(np.mean(within)) if within else None,
        between=between_spread([float(np.median(v)) for v in processes]),
        processes=len(processes),
        windows=max(1, int(np.median(counts))) if counts else 1,
    )
