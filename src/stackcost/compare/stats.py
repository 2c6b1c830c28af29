"""Is the candidate different from the baseline? Pure statistics, no I/O.

This is the comparison of two *stored* runs, measured at different times. One metric of
one cell is given as a list of repetitions, each a list of values (per-iteration
latencies, or a single number such as peak memory). A change is reported only when it
is large (beyond a relative threshold), significant, and beyond the between-run spread:

* Samples inside one process are correlated (same heap layout, same frequency state,
  same neighbours), so a test over pooled iterations is far too confident: two
  identical runs came out `improved -14.4%` at p = 1e-285. Its p-value is reported
  and decides nothing. The repetition medians are the independent units.
* Repetitions of one run share that run's moment on the machine, so two runs minutes
  apart differ by their drift, which no number of repetitions removes: identical runs
  here differed by up to BETWEEN_RUN_SPREAD. A change within it is `noisy`, never a
  verdict: compare interleaved (measure/paired.py, `stackcost ab`) to see below it.
* With 3 repetitions a side (3 vs 3 can never reach p < 0.05 two-sided in an exact
  Mann-Whitney test), significance over repetitions is complete separation: every
  candidate repetition beyond every baseline one. With 4 or more, the exact test.
* With fewer than MIN_REPETITIONS a side there is no verdict beyond the threshold.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

Verdict = Literal[
    "improved",
    "regressed",
    "unchanged",
    "noisy",
    "too few repetitions",  # beyond the threshold, but < MIN_REPETITIONS a side
    "untrusted base",  # the baseline cell is unstable or disturbed: no verdict
    "untrusted candidate",  # the candidate cell is disturbed: its timings are not valid
    "new",
    "missing",
    "newly failing",
    "fixed",
]
# Worst first: a cell's verdict is the worst of its metrics'.
SEVERITY: tuple[str, ...] = (
    "regressed",
    "newly failing",
    "too few repetitions",
    "noisy",
    "improved",
    "unchanged",
)

DEFAULT_THRESHOLD = 0.07
DEFAULT_ALPHA = 0.05
# Independent samples a side needed before a change may be called regressed or improved.
# Iterations inside one process share its heap layout, frequency state and neighbours, so
# they are correlated: only repetitions (one process each) count as samples. Two sweeps of
# the same code minutes apart, 2 repetitions a side, gave +6.6% latency at p = 6e-81 over
# pooled iterations; below 3 that pooled p-value would be the verdict's only evidence.
MIN_REPETITIONS = 3
# How far two stored runs of identical code drift apart on this kind of machine (2-vCPU
# shared VMs). benchmarks/gate_calibration.py measured it on 2026-11-25: over 18 cells of
# identical stored runs (3 repetitions each), a median of 28% and a 95th percentile of
# 94%; earlier sessions saw 10-35%. A stored-run change must exceed it to be a verdict;
# below it, only `stackcost ab` can tell. `compare --between-run-spread` sets another.
BETWEEN_RUN_SPREAD = 0.5


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    baseline: float  # median over repetitions of each repetition's median
    candidate: float
    change: float  # candidate / baseline - 1, in the metric's own direction
    worse_change: float  # > 0 means worse, whatever the metric's direction
    p_samples: float | None  # Mann-Whitney over pooled iterations: shown, decides nothing
    p_repetitions: float | None  # Mann-Whitney over repetition medians
    significant: bool
    decided_by: str  # which rule gave `significant`
    verdict: Verdict
    repetitions: tuple[int, int]  # (baseline, candidate): the independent samples

    @property
    def enough_repetitions(self) -> bool:
        return min(self.repetitions) >= MIN_REPETITIONS

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def min_attainable_p(n1: int, n2: int) -> float:
    """Smallest two-sided exact Mann-Whitney p-value for sample sizes n1, n2."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _mwu(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 2 or len(b) < 2 or (len(set(a)) == 1 and set(a) == set(b)):
        return None  # nothing to test (or identical constants: no evidence either way)
    # Imported here: scipy.stats would add ~0.65 s to every CLI start (this module's
    # constants are the compare command's defaults).
    from scipy.stats import mannwhitneyu

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
    spread: float = BETWEEN_RUN_SPREAD,
) -> MetricComparison:
    """Compare one metric; each side is a list of repetitions, each a list of values.
    `spread`: the between-run drift a change must exceed (0 for runs measured
    interleaved, whose drift is shared)."""
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
    n_base, n_cand = len(base_meds), len(cand_meds)
    if min(n_base, n_cand) < MIN_REPETITIONS:
        significant, rule = False, f"too few repetitions ({n_base} vs {n_cand})"
    elif min_attainable_p(n_base, n_cand) <= alpha:
        significant, rule = p_reps is not None and p_reps <= alpha, "repetitions"
    else:  # too few repetitions for their own test: complete separation
        significant, rule = _separated(base_meds, cand_meds, up=c > b), "separation"
    beyond_drift = abs(worse) > max(spread, threshold)

    verdict: Verdict
    if abs(worse) <= threshold:
        verdict = "unchanged"  # the point estimate alone says so: no test involved
    elif min(n_base, n_cand) < MIN_REPETITIONS:
        verdict = "too few repetitions"
    elif not (significant and beyond_drift):
        verdict = "noisy"
        if significant:
            rule += f", within the between-run spread (±{spread:.0%})"
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
        repetitions=(n_base, n_cand),
    )


def worst(verdicts: Sequence[str]) -> str:
    """The most severe verdict of a cell's metrics (unchanged when there are none)."""
    for v in SEVERITY:
        if v in verdicts:
            return v
    return "unchanged"


def status_verdict(base_measured: bool | None, cand_measured: bool | None) -> Verdict | None:
    """Verdicts decided by presence and status alone; None means: compare the metrics.
    `measured` is "has timings" (ok, unstable or disturbed): a disturbed cell is not
    failing, only untrusted, which compare_cells decides."""
    if base_measured is None:
        return "new"
    if cand_measured is None:
        return "missing"
    if base_measured and not cand_measured:
        return "newly failing"
    if cand_measured and not base_measured:
        return "fixed"
    if not base_measured:
        return "unchanged"  # failing on both sides: nothing new to say
    return None


__all__ = [
    "BETWEEN_RUN_SPREAD",
    "DEFAULT_ALPHA",
    "DEFAULT_THRESHOLD",
    "MIN_REPETITIONS",
    "MetricComparison",
    "compare_metric",
    "min_attainable_p",
    "status_verdict",
    "worst",
]
