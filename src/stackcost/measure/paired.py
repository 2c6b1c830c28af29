"""Paired, interleaved A/B statistics: is the candidate different from the base? No I/O.

Runs measured minutes apart differ by 10-20% on a small shared VM with nothing changed
(issue 26), so two stored runs cannot tell drift from change. An interleaved design
measures base (A) and candidate (B) side by side in blocks, each repetition its own
process, in the order ABBA or BAAB: a drift that is linear over a block cancels
exactly in the block's ratio, and a slower one almost does. Only the blocks are
treated as independent samples, never the iterations inside a process.

One block gives one log ratio: mean log(B repetition medians) - mean log(A's). The
ratios' mean has a Student-t interval over the blocks. The design is sequential: the
verdict is looked at after `looks` block counts, and stops at the first clear answer.
The error budget `alpha` is split evenly over the looks (Bonferroni), so whatever the
number of looks, the chance of a false `regressed` in an A/A comparison is at most
alpha / 2 (one side of a two-sided interval), and likewise for a false `improved`.

Verdicts, for a metric where lower is better (latency):
- regressed: the interval lies above 1 and the estimate beyond 1 + threshold;
- improved: the mirror image;
- unchanged: the interval lies inside ±threshold (equivalence), or at the last look the
  change is significant but within the threshold;
- noisy: at the last look, neither: more blocks or a quieter machine are needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

# scipy.special's Student t quantile: scipy.stats would add ~0.65 s to every CLI start.
from scipy.special import stdtrit

from stackcost.measure.stats import Spreads

PairedVerdict = Literal["regressed", "improved", "unchanged", "noisy", "undecided"]

DEFAULT_THRESHOLD = 0.03
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_BLOCKS = 4
DEFAULT_MAX_BLOCKS = 8
# Looks at the verdict between min and max blocks (each costs alpha / LOOKS): few looks
# keep each one's interval narrow; three allow a clear case to stop at a third of the cap.
LOOKS = 3


def look_points(min_blocks: int, max_blocks: int, count: int = LOOKS) -> tuple[int, ...]:
    """Block counts at which the verdict is looked at: evenly from min to max blocks."""
    if not 2 <= min_blocks <= max_blocks:
        raise ValueError(f"need 2 <= min_blocks ({min_blocks}) <= max_blocks ({max_blocks})")
    points = np.linspace(min_blocks, max_blocks, num=min(count, max_blocks - min_blocks + 1))
    return tuple(sorted({int(round(p)) for p in points}))


def block_log_ratio(base: Sequence[float], cand: Sequence[float]) -> float:
    """One block's log ratio candidate / base, from each side's repetition values
    (geometric means: a ratio of 1.1 and one of 1/1.1 are the same size of change)."""
    if not base or not cand or min(*base, *cand) <= 0:
        raise ValueError("a block needs positive values on both sides")
    return float(np.mean(np.log(cand)) - np.mean(np.log(base)))


@dataclass(frozen=True)
class PairedResult:
    """The paired comparison of one metric of one cell after `blocks` blocks."""

    blocks: int
    ratio: float  # geometric mean of the block ratios, candidate / base
    ci_low: float  # the ratio's interval at this look's level
    ci_high: float
    confidence: float  # the interval's level: 1 - alpha / looks
    change: float  # ratio - 1, in the metric's own direction
    worse_change: float  # > 0 means worse, whatever the metric's direction
    verdict: PairedVerdict
    final: bool  # True: stop measuring this cell (a clear verdict, or the last look)
    block_ratios: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def mean_interval(values: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval of the mean of independent samples
    (unbounded with fewer than two)."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, -math.inf, math.inf
    sd = float(x.std(ddof=1))
    half = float(stdtrit(x.size - 1, 0.5 + confidence / 2)) * sd / math.sqrt(x.size)
    return mean, mean - half, mean + half


def ratio_interval(log_ratios: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """(ratio, low, high): the Student-t interval of the mean log ratio, exponentiated."""
    mean, low, high = mean_interval(log_ratios, confidence)
    return math.exp(mean), math.exp(low), math.exp(high)


def decide(
    log_ratios: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    min_blocks: int = DEFAULT_MIN_BLOCKS,
    max_blocks: int = DEFAULT_MAX_BLOCKS,
    higher_is_better: bool = False,
    last: bool = False,
) -> PairedResult:
    """The verdict after len(log_ratios) blocks. Between looks it is `undecided`;
    `last` makes this the last look (the cap was reached with blocks lost on the way)."""
    n = len(log_ratios)
    looks = look_points(min_blocks, max_blocks)
    confidence = 1 - alpha / len(looks)
    ratio, low, high = ratio_interval(log_ratios, confidence)
    last = last or n >= max_blocks
    sign = -1.0 if higher_is_better else 1.0
    # In the "worse" direction: a ratio above 1 is worse for latency, better for a rate.
    worse_low, worse_high = sorted((low**sign, high**sign))
    band_high, band_low = 1 + threshold, 1 / (1 + threshold)
    verdict: PairedVerdict = "undecided"
    if n in looks or last:
        if worse_low > 1 and ratio**sign > band_high:
            verdict = "regressed"
        elif worse_high < 1 and ratio**sign < band_low:
            verdict = "improved"
        elif band_low <= low and high <= band_high:
            verdict = "unchanged"
        elif last:
            significant = worse_low > 1 or worse_high < 1
            verdict = "unchanged" if significant else "noisy"
    return PairedResult(
        blocks=n,
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        change=ratio - 1,
        worse_change=ratio**sign - 1,
        verdict=verdict,
        final=verdict != "undecided",
        block_ratios=tuple(math.exp(r) for r in log_ratios),
    )


def sequential(
    log_ratios: Sequence[float],
    **rule: Any,
) -> PairedResult:
    """Replay the sequential design over blocks in order: the verdict at the first look
    that gives one (what `stackcost ab` would have stopped on), else at the last block."""
    result = None
    for n in range(2, len(log_ratios) + 1):
        result = decide(log_ratios[:n], **rule)
        if result.final:
            return result
    if result is None:
        raise ValueError("need at least 2 blocks")
    return result


def paired_spreads(blocks: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Spreads:
    """Where a bursts A/B's ratio varied: `within`, the SD of the pairs' log ratios inside
    a block (the mean over blocks with two or more pairs); `between`, the SD of the blocks'
    estimates (their mean log ratios); `windows`, the typical pairs a block. A block's
    estimate would scatter by within / sqrt(pairs) if its process pair added nothing of its
    own: `between_dominates` says it does, and only more blocks (processes) average it. The
    machine's modes, which the pairs cancel, are in neither: a side's own bursts
    (stats.process_spreads) would count them as noise within."""
    ratios = [
        [math.log(c / b) for b, c in zip(base, cand, strict=False) if b > 0 and c > 0]
        for base, cand in blocks
    ]
    ratios = [r for r in ratios if r]
    within = [float(np.std(r, ddof=1)) for r in ratios if len(r) >= 2]
    estimates = [float(np.mean(r)) for r in ratios]
    return Spreads(
        within=float(np.mean(within)) if within else None,
        between=float(np.std(estimates, ddof=1)) if len(estimates) >= 2 else None,
        processes=len(ratios),
        windows=max(1, int(np.median([len(r) for r in ratios]))) if ratios else 1,
    )


__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MAX_BLOCKS",
    "DEFAULT_MIN_BLOCKS",
    "DEFAULT_THRESHOLD",
    "PairedResult",
    "block_log_ratio",
    "decide",
    "look_points",
    "mean_interval",
    "paired_spreads",
    "ratio_interval",
    "sequential",
]
