"""What one cell's stored measurement says, in the figures a decision reads."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from stackcost.cell import Cell
    from stackcost.result import RateFigures
    from stackcost.store.runs import CellResult


@dataclass(frozen=True)
class Evidence:
    """One cell as measured: its status and, where valid, its figures.

    `median_ms` is the median of its repetitions' medians (one call: one batch);
    `tail_ms` the pooled iterations' percentile the constraints name; `throughput` is
    samples/s at the median; `memory_bytes` the highest peak RSS of its repetitions;
    `interval` the 95% interval of the repetitions' medians (None below two). For token
    generation a call is one decode step: the median is TPOT's, throughput is tokens/s
    of the batch while decoding, and `ttft_ms` the time to the first token."""

    key: str
    backend: str
    precision: str
    batch_size: int
    threads: int
    sizes: dict[str, int]
    status: str
    reason: str = ""
    repetitions: int = 0
    median_ms: float | None = None
    tail_ms: float | None = None
    throughput: float | None = None
    memory_bytes: int | None = None
    interval: tuple[float, float] | None = None
    max_rel_err: float | None = None
    ttft_ms: float | None = None  # token generation: the repetitions' median TTFT
    # `unstable` only because its processes' medians differ beyond the target: each
    # process was ok, the cell's speed varies between processes (issue 62's layouts).
    between_processes: bool = False
    # Served: the lowest rate above the held one that its sweep did not hold (its burst's
    # rate where every rate held), median over processes. Its capacity lies between the
    # two; a short sweep's grid is coarse, so the screening judges it by this.
    ceiling: float | None = None
    details: dict[str, object] = field(default_factory=dict)

    @property
    def label(self) -> str:
        sizes = "".join(f" {k} {v}" for k, v in self.sizes.items())
        return f"{self.backend} {self.precision} b{self.batch_size} t{self.threads}{sizes}"

    def reach(self, objective: str) -> float | None:
        """The most the objective could be: its figure, or, for a served cell's rate, the
        ceiling its sweep's grid leaves above the rate held."""
        value = self.value(objective)
        if objective == "throughput" and value is not None and self.ceiling is not None:
            return max(value, self.ceiling)
        return value

    def spec_fields(self) -> dict[str, object]:
        """The RunSpec fields of this one cell (api.advise.Search.fields' overrides)."""
        return {
            "backends": [self.backend],
            "precisions": [self.precision],
            "batch_sizes": [self.batch_size],
            "threads": [self.threads],
            "sizes": {k: [v] for k, v in self.sizes.items()},
        }

    @property
    def measured(self) -> bool:
        return self.median_ms is not None

    def value(self, objective: str) -> float | None:
        """The figure `objective` ranks by (advise.constraints.OBJECTIVES)."""
        return {
            "latency": self.median_ms,
            "throughput": self.throughput,
            "memory": float(self.memory_bytes) if self.memory_bytes is not None else None,
        }[objective]


def search_key(cell: Cell) -> str:
    """A cell's key within a search: a served cell's without its sweep, which is part of
    its stored key (the screening sweeps it shorter than the finals do)."""
    return (cell if cell.serve is None else cell.model_copy(update={"serve": None})).key()


def axes_of(cell: Cell) -> dict[str, Any]:
    """The Evidence fields that name a cell: its key within the search and its axes."""
    return {
        "key": search_key(cell),
        "backend": cell.backend,
        "precision": cell.precision,
        "batch_size": cell.batch_size,
        "threads": cell.threads,
        "sizes": dict(cell.sizes),
    }


def evidence_of(result: CellResult, percentile: str = "p99") -> Evidence:
    """A stored cell's evidence; a cell with no valid repetition keeps only its status
    and reason. A served cell's is served_evidence_of's."""
    if result.cell.serve is not None:
        return served_evidence_of(result)
    cell = result.cell
    medians = result.repetition_medians
    pooled = result.stats
    memory = result.peak_memory
    median = statistics.median(medians) if medians and result.valid else None
    interval = result.interval
    details = next((r.details for r in result.repetitions if r.details), {})
    ttfts = [r.generation.ttft_ms for r in result.repetitions if r.generation is not None]
    return Evidence(
        **axes_of(cell),
        status=result.status,
        reason=result.reason,
        repetitions=len(result.repetitions),
        median_ms=median,
        tail_ms=getattr(pooled, f"{percentile}_ms") if pooled and median else None,
        throughput=cell.batch_size * 1000.0 / median if median else None,
        memory_bytes=memory.peak_rss_bytes if memory else None,
        interval=(interval.low_ms, interval.high_ms) if interval and median else None,
        max_rel_err=result.max_rel_err,
        ttft_ms=statistics.median(ttfts) if ttfts and median else None,
        between_processes=result.status == "unstable" and result.repetition_status == "ok",
        details=dict(details),
    )


def served_evidence_of(result: CellResult, more: Sequence[CellResult] = ()) -> Evidence:
    """A served cell's evidence (`--scenario serve`): each process's sweep gives the
    highest request rate it held within the SLO (serving.records.highest_held); the cell's
    rate is their median, a process that held none counting as 0. `throughput` is that
    rate (requests/s) and `median_ms` its inverse, the time per request at it, so that the
    ranking and the tie rule read it as they read a timed cell's median; `interval` spans
    the processes' rates, as time per request. `tail_ms` and `ttft_ms` are the p99 TPOT
    and p99 TTFT at the held rate, the median over the processes that held one. `more`:
    the same cell's processes from later runs, pooled with `result`'s."""
    from stackcost.serving.records import highest_held

    cell, serve = result.cell, result.cell.serve
    assert serve is not None
    runs = [result, *more]
    invalid = next((c for c in runs if not c.valid), None)
    status, reason = (result.status, result.reason) if invalid is None else (
        invalid.status, invalid.reason
    )  # fmt: skip
    reps = [r for c in runs for r in c.repetitions]
    sweeps = [r.serving for r in reps if r.valid and r.serving is not None]
    best = [highest_held(s.rates, serve.ttft_bound_ms, serve.tpot_bound_ms) for s in sweeps]
    rates = [b.request_rps if b is not None else 0.0 for b in best]
    ceilings = [
        _ceiling(s.rates, rate, serve.ttft_bound_ms, serve.tpot_bound_ms)
        for s, rate in zip(sweeps, rates, strict=True)
    ]
    held = [b for b in best if b is not None]
    rate = statistics.median(rates) if rates and invalid is None else 0.0
    memories = [m for c in runs if (m := c.peak_memory) is not None]
    memory = max(memories, key=lambda m: m.peak_rss_bytes) if memories else None
    if invalid is None and sweeps and rate <= 0:
        reason = f"no rate held within the SLO ({serve.label()})"
    details = next((r.details for r in reps if r.details), {})
    return Evidence(
        **axes_of(cell),
        status=status,
        reason=reason,
        repetitions=len(reps),
        median_ms=1000.0 / rate if rate > 0 else None,
        tail_ms=statistics.median(b.tpot_ms.p99 or 0.0 for b in held) if held and rate else None,
        throughput=rate if rate > 0 else None,
        memory_bytes=memory.peak_rss_bytes if memory else None,
        interval=(1000.0 / max(rates), 1000.0 / min(rates))
        if len(rates) > 1 and min(rates) > 0
        else None,
        ttft_ms=statistics.median(b.ttft_ms.p99 or 0.0 for b in held) if held and rate else None,
        ceiling=statistics.median(ceilings) if ceilings and rate else None,
        details=dict(details),
    )


def _ceiling(
    rates: list[RateFigures], held: float, ttft_bound_ms: float | None, tpot_bound_ms: float | None
) -> float:
    """The lowest achieved rate above `held` that the sweep did not hold, else its burst's
    rate (requests/s); `held` itself when there is neither."""
    from stackcost.serving.records import held as holds

    missed = [
        f.request_rps
        for f in rates
        if f.request_rps > held and not holds(f, ttft_bound_ms, tpot_bound_ms)
    ]
    burst = [f.request_rps for f in rates if f.process == "burst"]
    return min(missed) if missed else max([held, *burst])
