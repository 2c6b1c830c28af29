"""advise's answer as stored: the recommendation, how it was decided, and the evidence of
every cell of the search space, each with the phase that decided it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from stackcost.advise.evidence import Evidence


class Entry(BaseModel):
    """One cell of the search space and what became of it."""

    label: str
    backend: str
    precision: str
    batch_size: int
    threads: int
    sizes: dict[str, int] = Field(default_factory=dict)
    phase: str  # "feasibility", "screening", "quality", "final", "not tried"
    status: str  # the cell's status in that phase (or "not tried")
    decision: str  # "recommended", "runner-up", "finalist", "kept", or why it is out
    repetitions: int = 0
    median_ms: float | None = None
    tail_ms: float | None = None  # at the constraints' percentile
    throughput: float | None = None  # samples/s (tokens/s while decoding)
    ttft_ms: float | None = None  # token generation: time to the first token
    memory_bytes: int | None = None  # peak RSS
    interval: tuple[float, float] | None = None  # of the median, over repetitions (ms)
    quality: str = ""  # its rung and precision held out, in words, when judged
    quality_loss: float | None = None  # points of accuracy, or percent of perplexity

    @classmethod
    def of(cls, e: Evidence, phase: str, decision: str) -> Entry:
        return cls(
            label=e.label,
            backend=e.backend,
            precision=e.precision,
            batch_size=e.batch_size,
            threads=e.threads,
            sizes=e.sizes,
            phase=phase,
            status=e.status,
            decision=decision,
            repetitions=e.repetitions,
            median_ms=e.median_ms,
            tail_ms=e.tail_ms,
            throughput=e.throughput,
            memory_bytes=e.memory_bytes,
            interval=e.interval,
            ttft_ms=e.ttft_ms,
        )


class Comparison(BaseModel):
    """The paired, interleaved measurement of the two best finalists (`stackcost ab`'s
    machinery): `ratio` is the runner-up's step time over the recommended one's."""

    pair_id: str
    recommended: str
    runner_up: str
    verdict: str  # the pair's verdict on latency: unchanged, regressed, improved, noisy
    ratio: float
    ci_low: float
    ci_high: float
    design: str
    blocks: int


class Advice(BaseModel):
    """The whole answer."""

    model: str
    mode: str = "infer"  # or "generate": a call is one decode step, throughput tokens/s
    objective: str
    constraints: dict[str, Any]
    constraints_words: str
    margin: float
    threshold: float
    budget_s: float
    request: str = ""  # the request's digest (api.advise.Search.digest): same question
    recommended: Entry | None = None
    runner_up: Entry | None = None
    decided_by: str = ""  # how the recommendation was chosen, in words
    why_none: str = ""  # when nothing is recommended
    comparison: Comparison | None = None
    entries: list[Entry] = Field(default_factory=list)
    not_tried: list[str] = Field(default_factory=list)
    screen_check: str = ""  # the screening against the finalists' full measurements
    # Each rung and precision judged held out (advise.quality.Quality's fields).
    quality: list[dict[str, Any]] = Field(default_factory=list)
    runs: dict[str, list[str]] = Field(default_factory=dict)
    reproduce: str = ""
    artifact: str = ""  # the recommended cell's exported or compiled artifact, kept
    artifact_note: str = ""  # what it holds, or why there is none
    wall_s: float = 0.0
    id: str = ""
