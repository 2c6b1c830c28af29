"""What one cell's stored measurement says, in the figures a decision reads."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
    details: dict[str, object] = field(default_factory=dict)

    @property
    def label(self) -> str:
        sizes = "".join(f" {k} {v}" for k, v in self.sizes.items())
        return f"{self.backend} {self.precision} b{self.batch_size} t{self.threads}{sizes}"

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


def evidence_of(result: CellResult, percentile: str = "p99") -> Evidence:
    """A stored cell's evidence; a cell with no valid repetition keeps only its status
    and reason."""
    cell = result.cell
    medians = result.repetition_medians
    pooled = result.stats
    memory = result.peak_memory
    median = statistics.median(medians) if medians and result.valid else None
    interval = result.interval
    details = next((r.details for r in result.repetitions if r.details), {})
    ttfts = [r.generation.ttft_ms for r in result.repetitions if r.generation is not None]
    return Evidence(
        key=cell.key(),
        backend=cell.backend,
        precision=cell.precision,
        batch_size=cell.batch_size,
        threads=cell.threads,
        sizes=dict(cell.sizes),
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
