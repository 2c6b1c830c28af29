"""Figures of a cell between two measured batch sizes of the same rung, precision and
threads, estimated rather than measured.

A batch's call time on one rung is close to a fixed cost plus a per-sample cost: linear in
the batch between two measured ends. The estimate decides only which middle batches are
worth a screening process; a cell pruned on it says its figures were estimated, and how.
The benchmark `benchmarks/advise_vs_brute.py` checks the pruning against every cell
measured."""

from __future__ import annotations

from dataclasses import replace

from stackcost.advise.evidence import Evidence

ESTIMATED = "estimated"  # the status of a cell whose figures are interpolated


def _between(low: float | None, high: float | None, share: float) -> float | None:
    if low is None or high is None:
        return None
    return low + (high - low) * share


def interpolated(low: Evidence, high: Evidence, key: str, batch_size: int) -> Evidence | None:
    """The figures at `batch_size`, linear in the batch between `low` and `high` (two
    measured cells of one rung, precision, threads and sizes at smaller and larger
    batches), or None when either end has no median."""
    if (
        low.median_ms is None
        or high.median_ms is None
        or not (low.batch_size < batch_size < high.batch_size)
    ):
        return None
    share = (batch_size - low.batch_size) / (high.batch_size - low.batch_size)
    median = _between(low.median_ms, high.median_ms, share)
    assert median is not None
    memory = _between(low.memory_bytes, high.memory_bytes, share)
    return replace(
        low,
        key=key,
        batch_size=batch_size,
        status=ESTIMATED,
        reason=f"linear in batch between b{low.batch_size} and b{high.batch_size} as screened",
        repetitions=0,
        median_ms=median,
        tail_ms=_between(low.tail_ms, high.tail_ms, share),
        throughput=batch_size * 1000.0 / median,
        memory_bytes=int(memory) if memory is not None else None,
        ttft_ms=_between(low.ttft_ms, high.ttft_ms, share),
        interval=None,
        max_rel_err=None,
        details={},
    )
