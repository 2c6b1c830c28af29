"""Is the candidate different from the baseline? Pure statistics, no I/O.

One metric of one cell is given as a list of repetitions, each a list of values
(per-iteration latencies, or a single number such as peak memory). A change is
reported only when it is both large (beyond a relative threshold) and significant:

* Samples inside one process are correlated (same heap layout, same frequency state,
  same neighbours), so a Mann-Whitney U test over pooled iterations is far too
  confident. The repetition medians are the independent units: with enough
  repetitions the test over them decides.
* With few repetitions (3 vs 3 can never reach p < 0.05 two-sided in an exact
  Mann-Whitney test), significance falls back to: the iteration-level test is
  significant AND every candidate repetition lies beyond every baseline repetition
  in the direction of the change. Together with the threshold that stays quiet.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from scipy.stats import mannwhitneyu

Verdict = Literal[
    "improved", "regressed", "unchanged", "noisy", "new", "missing", "newly failing", "fixed"
]
# Worst first: a cell's verdict is the worst of its metrics'.
SEVERITY: tuple[str, ...] = ("regressed", "newly failing", "noisy", "improved", "unchanged")

DEFAULT_THRESHOLD = 0.07
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    baseline: float  # median over repetitions of each repetition's median
    candidate: float
    change: float  # candidate / baseline - 1, in the metric's own direction
    worse_change: float  # > 0 means worse, whatever the metric's direction
    p_samples: float | None  # Mann-Whitney over pooled values (iterations)
    p_repetitions: float | None  # Mann-Whitney over repetition medians
    significant: bool
    decided_by: str  # which rule gave `significant`
    verdict: Verdict

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def min_attainable_p(n1: int, n2: int) -> float:
    """Smallest two-sided exact Mann-Whitney p-value for sample sizes n1, n2."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _mwu(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 2 or len(b) < 2 or (len(set(a)) == 1 and set(a) == set(b)):
        return None  # nothing to test (or identical constants: no evidence either way)
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def _separated(base: Sequence[float], cand: Sequence[float], up: bool) -> bool:
    return min(cand) > max(base) if up else max(cand) < min(base)


def compare_metric(
    metric: str,
    baseline: Sequence[Sequence[float]],
    candidate: Sequence[Sequence[float]],
    *,
    higher_is_better: bool = False,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
) -> MetricComparison:
    """Compare one metric; each side is a list of repetitions, each a list of values."""
    base_reps = [list(map(float, r)) for r in baseline if len(r)]
    cand_reps = [list(map(float, r)) for r in candidate if len(r)]
    if not base_reps or not cand_reps:
        raise ValueError(f"{metric}: both sides need at least one repetition with values")
    base_meds = [statistics.median(r) for r in base_reps]
    cand_meds = [statistics.median(r) for r in cand_reps]
    b, c = statistics.median(base_meds), statistics.median(cand_meds)
    change = c / b - 1.0 if b else (0.0 if c == b else math.inf)
    worse = -change if higher_is_better else change

    pooled_b = [v for r in base_reps for v in r]
    pooled_c = [v for r in cand_reps for v in r]
    # One value per repetition (memory, cold start): there is no iteration-level test.
    per_iter = len(pooled_b) > len(base_reps) or len(pooled_c) > len(cand_reps)
    p_samples = _mwu(pooled_b, pooled_c) if per_iter else None
    p_reps = _mwu(base_meds, cand_meds)
    many = len(base_meds) >= 2 and len(cand_meds) >= 2
    if many and min_attainable_p(len(base_meds), len(cand_meds)) <= alpha:
        significant, rule = p_reps is not None and p_reps <= alpha, "repetitions"
    elif many:
        # Too few repetitions for their own test: iterations + complete separation.
        sep = _separated(base_meds, cand_meds, up=c > b)
        in_samples = not per_iter or (p_samples is not None and p_samples <= alpha)
        significant, rule = sep and in_samples, "samples+separation"
    elif p_samples is not None:
        significant, rule = p_samples <= alpha, "samples (1 repetition: optimistic)"
    else:
        significant, rule = False, "untestable (1 value a side)"

    verdict: Verdict
    if abs(worse) <= threshold:
        verdict = "unchanged"
    elif not significant:
        verdict = "noisy"
    else:
        verdict = "regressed" if worse > 0 else "improved"
    return MetricComparison(
        metric=metric,
        baseline=b,
        candidate=c,
        change=change,
        worse_change=worse,
        p_samples=p_samples,
        p_repetitions=p_reps,
        significant=significant,
        decided_by=rule,
        verdict=verdict,
    )


def worst(verdicts: Sequence[str]) -> str:
    """The most severe verdict of a cell's metrics (unchanged when there are none)."""
    for v in SEVERITY:
        if v in verdicts:
            return v
    return "unchanged"


def status_verdict(base_valid: bool | None, cand_valid: bool | None) -> Verdict | None:
    """Verdicts decided by presence and status alone; None means: compare the metrics."""
    if base_valid is None:
        return "new"
    if cand_valid is None:
        return "missing"
    if base_valid and not cand_valid:
        return "newly failing"
    if cand_valid and not base_valid:
        return "fixed"
    if not base_valid:
        return "unchanged"  # failing on both sides: nothing new to say
    return None


__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_THRESHOLD",
    "MetricComparison",
    "compare_metric",
    "min_attainable_p",
    "status_verdict",
    "worst",
]
