"""What one repetition produces; the JSON a worker (Python or C++) sends back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stackcost.measure.copies import HostCopies
from stackcost.measure.disturbance import Disturbance
from stackcost.measure.energy import Energy
from stackcost.measure.flops import Work
from stackcost.measure.stats import Stats
from stackcost.measure.telemetry import Telemetry
from stackcost.profile.breakdown import Breakdown
from stackcost.verify import Verification

Status = Literal[
    "ok",  # measured, verified, stop rule met
    "unstable",  # measured and verified, but the time cap stopped it or warmup never settled
    "disturbed",  # measured and verified, but other processes used the cores meanwhile
    "wrong",  # output outside tolerance: timings are not valid
    "failed",  # exception inside the worker
    "crashed",  # the worker died on a signal (segfault, abort)
    "oom",  # out of memory (MemoryError, or SIGKILL from the kernel)
    "timeout",  # killed after the repetition timeout
    "interrupted",  # Ctrl-C
    "unavailable",  # backend cannot run on this machine (reason says how to fix)
    "unsupported",  # backend cannot run this cell (mode, precision or device)
    "skipped",  # not run: a smaller batch of the same series ran out of memory or time
    "diverged",  # training loss went NaN/inf or blew up: a result, but not a usable one
]
# Timings a view may use (a disturbed repetition's are stored, shown marked, never pooled).
VALID_STATUSES: frozenset[str] = frozenset({"ok", "unstable"})
# Timings that exist at all: valid ones, and those taken while the machine was busy.
MEASURED_STATUSES: frozenset[str] = VALID_STATUSES | {"disturbed"}
# Timings fit to be a baseline or a ratio's denominator ("vs eager", compare's base).
TRUSTED_STATUSES: frozenset[str] = frozenset({"ok"})
FAILED_STATUSES: frozenset[str] = frozenset(
    {"wrong", "failed", "crashed", "oom", "timeout", "interrupted", "diverged"}
)


Verdict = Literal["VALID", "INVALID"]


class ScenarioResult(BaseModel):
    """One repetition's LoadGen run: its verdict, headline and the summary's numbers.

    A LoadGen sample is one call of the prepared step on the cell's batch, so `value` in
    samples/s counts batches; `throughput` of the repetition counts inputs."""

    scenario: str
    verdict: Verdict
    metric: str  # "p90 latency", "p99 latency", "QPS at bound", "throughput"
    unit: str  # "ms", "QPS", "samples/s"
    value: float | None  # None: LoadGen produced no headline (see notes)
    constraints: dict[str, bool] = Field(default_factory=dict)  # "Min duration satisfied"...
    notes: list[str] = Field(default_factory=list)  # LoadGen's recommendations, early stopping
    summary: dict[str, float | str] = Field(default_factory=dict)  # every "key : value" line
    settings: dict[str, Any] = Field(default_factory=dict)  # what LoadGen was told
    instances: int = 1
    errors: int = 0  # LoadGen's own error count ("N ERRORS encountered")

    @property
    def latency_ms(self) -> float | None:
        """The headline when it is a latency (single-stream, multi-stream)."""
        return self.value if self.unit == "ms" else None

    @property
    def rate(self) -> float | None:
        """The headline when it is a rate (server QPS, offline samples/s)."""
        return self.value if self.unit != "ms" else None

    def shown(self) -> str:
        """'2.21 ms p90', '132 QPS at bound', '452 samples/s' ('—' without a value)."""
        if self.value is None:
            return "—"
        number = f"{self.value:.3g}" if self.value < 1000 else f"{self.value:,.0f}"
        tail = (
            f" {self.metric}" if self.unit == "ms" else (" at bound" if self.unit == "QPS" else "")
        )
        return f"{number} {self.unit}{tail}".replace(" latency", "")

    def why_invalid(self) -> str:
        """Which of LoadGen's requirements failed, in its words ('' when VALID)."""
        if self.verdict == "VALID":
            return ""
        failed = [
            name.removesuffix(" satisfied").lower()
            for name, ok in self.constraints.items()
            if not ok
        ]
        why = "; ".join(f"{f} not satisfied" for f in failed) or "see the LoadGen summary"
        return f"LoadGen INVALID: {why}"


# The percentiles a serving rate reports of each latency (vLLM's benchmark_serving's).
PERCENTILES = (50, 90, 99)


class Spread(BaseModel):
    """Percentiles of one latency, in ms; None where no request gave one."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None
    count: int = 0

    @classmethod
    def of(cls, values_ns: list[float]) -> Spread:
        import numpy as np

        if not values_ns:
            return cls()
        ms = np.asarray(values_ns, dtype=float) / 1e6
        p50, p90, p99 = (float(v) for v in np.percentile(ms, PERCENTILES))
        return cls(p50=p50, p90=p90, p99=p99, mean=float(ms.mean()), count=len(ms))


class RateFigures(BaseModel):
    """One rate of a sweep, as stored."""

    label: str  # "one at a time", "max throughput", "4.00 req/s"
    target_rps: float | None  # the schedule's rate; None for one at a time, inf for all at once
    process: str  # "poisson", "constant", "sequential", "burst"
    sent: int
    completed: int
    failed: int
    duration_s: float
    request_rps: float  # completed requests / duration
    output_tokens_per_s: float
    goodput_rps: float | None  # None without bounds
    ttft_ms: Spread
    tpot_ms: Spread
    itl_ms: Spread
    e2e_ms: Spread
    queueing_ms: Spread  # estimated: TTFT over the unloaded median
    lateness_ms: Spread  # how late the client sent against the schedule
    in_flight_peak: int
    # (seconds, in flight, engine running, engine queued) every 50 ms
    occupancy: list[tuple[float, int, int | None, int | None]] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)  # distinct reasons, first seen first
    ended_by: str | None = None


class ServeResult(BaseModel):
    """A serve repetition: the engine that batched the requests, and each rate of its sweep
    as it finished (serving/records.py defines every figure)."""

    engine: str  # what batched the requests: "continuous batching (transformers ...)"
    transport: str  # "in process", "HTTP on loopback (OpenAI-compatible)"
    prompt_len: int
    new_tokens: int
    lengths: str  # fixed, uniform:LO-HI, file:PATH
    arrivals: str  # poisson or constant, between the sweep's ends
    # The engine's greedy tokens for the verified prompt against eager fp32's, before it
    # served (the rung itself is verified by teacher forcing, as generate's).
    engine_agreement: float | None = None
    rates: list[RateFigures] = Field(default_factory=list)
    budget_s: float
    elapsed_s: float | None = None


class GenerationResult(BaseModel):
    """A generate repetition's token numbers (generation/metrics.py defines each). Medians
    are over the repetition's timed generations; TPOT percentiles pool their decode steps.
    Every generation is greedy and seeded with exactly new_tokens per row, EOS ignored."""

    batch: int
    prompt_len: int
    new_tokens: int
    generations: int  # timed, after the cold one
    ttft_ms: float  # median over generations: prefill + the first token
    tpot_p50_ms: float | None  # per decode step (one token to every row); None: 1 token
    tpot_p90_ms: float | None
    tpot_p99_ms: float | None
    prefill_tokens_per_s: float  # batch x prompt_len / TTFT
    decode_tokens_per_s: float | None  # batch x (N - 1) / decode time; prefill excluded
    output_tokens_per_s: float  # batch x N / end-to-end
    e2e_ms: float  # median over generations
    cold_ms: float  # the first generation, compile included
    kv_cache_bytes: int  # at the end: every layer's K and V for prompt + new tokens, all rows
    kv_bytes_per_element: float  # as the rung keeps its cache
    weight_bytes: int  # the rung's weights, in its own format (file or parameters)
    # weights, less the untied input embedding table but for the batch's rows of it, + the
    # KV cache at the mean decode context
    bytes_per_step: int
    achieved_gbs: float | None  # bytes_per_step / TPOT p50, 1e9 B/s
    api: str  # what drove generation
    timing: str  # where each token's clock reading came from
    # Information only (near-ties under random weights): the rung's greedy tokens against
    # eager fp32's over the verified steps, as a fraction, and the matching prefix length.
    token_agreement: float | None = None
    agreeing_prefix: int | None = None
    definition: str = ""
    # The input embedding table within weight_bytes: a step gathers the batch's rows of it.
    # 0: the LM head shares it and reads it whole. None: a run from before it was counted.
    gathered_bytes: int | None = None


class EpochRecord(BaseModel):
    """One training epoch of one repetition; times in seconds, rates in samples/s."""

    # A diverged epoch's NaN/inf loss must survive the worker's JSON, not become null.
    model_config = ConfigDict(ser_json_inf_nan="constants")

    epoch: int  # 1-based
    complete: bool = True  # False: the repetition diverged inside this epoch
    steps: int
    train_samples: int
    train_loss: float  # mean over the epoch's steps
    train_accuracy: float  # on the training batches as they were trained (model in train mode)
    eval_accuracy: float | None = None  # held-out split, model in eval mode
    eval_loss: float | None = None
    eval_samples: int = 0
    epoch_s: float  # train loop + eval
    train_s: float  # wall time of the train loop (loader + copy + step)
    loader_wait_s: float  # fetching and collating batches
    step_s: float  # forward + backward + optimizer step, synchronized
    eval_s: float | None = None
    train_samples_per_s: float
    eval_samples_per_s: float | None = None
    copy_bytes_per_batch: float  # host -> device bytes (inputs + labels)
    copy_ms_per_batch: float  # on CPU the copy is a no-op: this is its overhead
    copy_device: str = "cpu"
    copy_pinned: bool | None = None  # pinned host memory; None where there is no CUDA


class Memory(BaseModel):
    baseline_rss_bytes: int  # after imports, before the model is built
    peak_rss_bytes: int  # high-water mark from the backend's prepare to the end
    peak_over_baseline_bytes: int
    allocator_peak_bytes: int | None = None  # torch.cuda.max_memory_allocated on GPU
    method: str = "VmHWM"


class Phases(BaseModel):
    """Fixed costs of one repetition, seconds."""

    # Parent-side wall time not spent in run_task: interpreter start, worker imports, exit.
    spawn_s: float | None = None
    import_s: float | None = None
    build_s: float | None = None
    reference_s: float | None = None
    prepare_s: float | None = None
    warmup_s: float | None = None
    timed_s: float | None = None
    total_s: float | None = None


class Node(BaseModel):
    """The Ray node a repetition ran on (execute/ray_executor.py)."""

    node_id: str
    # stackcost.env.fingerprint of the node's own environment: the run's is the driver's.
    env_fingerprint: str | None = None
    cores: list[int] = Field(default_factory=list)  # pinned to these; empty: unpinned
    waited_s: float = 0.0  # for its cores, on the node, before the worker started


class LostAttempt(BaseModel):
    """A try of this repetition whose node (or Ray worker) died before it finished; the
    repetition then ran again, elsewhere if the node was gone."""

    node_id: str | None = None  # where Ray's error names it
    host: str | None = None
    error: str
    at: str


class RepetitionResult(BaseModel):
    status: Status
    reason: str = ""
    repetition: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    cold_start_ms: float | None = None  # first call, compile included
    warmup_iters: int | None = None
    warmup_settled: bool | None = None
    stop_reason: str | None = None
    stats: Stats | None = None
    throughput: float | None = None  # samples per second = batch / median
    samples_ns: list[int] = Field(default_factory=list)
    memory: Memory | None = None
    verification: Verification | None = None
    phases: Phases = Field(default_factory=Phases)
    weights_digest: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)  # backend knobs and versions
    epochs: list[EpochRecord] = Field(default_factory=list)  # training cells only
    log_tail: str = ""  # last lines of the worker's stderr, for failures
    # RSS at each stop-rule check of the timed loop, and the iteration count at each.
    rss_trace_bytes: list[int] = Field(default_factory=list)
    rss_trace_iters: list[int] = Field(default_factory=list)
    leak: dict[str, Any] | None = None  # measure.leak.check_leak: slope, CI, flag
    # --profile (issue 6): where the time goes, how much work, utilization and energy.
    breakdown: Breakdown | None = None  # a separate profiled pass after the timed loop
    work: Work | None = None  # FLOPs and estimated bytes of one call (one batch)
    achieved_gflops: float | None = None  # work.flops / median step time
    telemetry: Telemetry | None = None  # side-channel sampler over the timed loop
    energy: Energy | None = None  # measured or estimated: always labelled with its method
    profile_notes: list[str] = Field(default_factory=list)  # what could not be profiled, why
    # --profile on a GPU: the batch's host -> device copy, pageable and pinned.
    host_copies: HostCopies | None = Field(None, exclude_if=lambda c: c is None)
    # Other processes' CPU over the timed loop (always measured; None where not timed).
    disturbance: Disturbance | None = None
    # A scenario cell's LoadGen run: its verdict, headline metric and summary numbers.
    scenario: ScenarioResult | None = None
    # A generate cell's token numbers: TTFT, TPOT, tokens/s, KV bytes, bandwidth.
    generation: GenerationResult | None = Field(None, exclude_if=lambda g: g is None)
    # A serve cell's rate sweep (left out when None, so other results' JSON is unchanged).
    serving: ServeResult | None = Field(None, exclude_if=lambda s: s is None)
    # A sweep that did not finish (its worker or its engine died): the rates it finished,
    # in order. The store keeps them as the repetition's progress, apart from this result,
    # and a resume runs the rest (execute/runner.py); never stored inside the result.
    kept_rates: list[RateFigures] = Field(default_factory=list, exclude_if=lambda k: not k)
    host: str | None = None  # the machine it ran on (hostname)
    node: Node | None = None  # on a Ray cluster: the node, its environment, its cores
    lost_attempts: list[LostAttempt] = Field(default_factory=list)  # tries a dead node lost

    @property
    def leak_bytes_per_iter(self) -> float | None:
        return self.leak["bytes_per_iter"] if self.leak else None

    @property
    def startup_ms(self) -> float | None:
        """Time to the first output: the backend's prepare (export, AOT compile) + cold call.

        None for a repetition that reused an earlier repetition's export or compile
        (backends/artifacts.py): its prepare skipped what startup measures."""
        if self.cold_start_ms is None or self.phases.prepare_s is None or self.reused_artifact:
            return None
        return self.phases.prepare_s * 1e3 + self.cold_start_ms

    @property
    def reused_artifact(self) -> bool:
        """Whether this repetition's prepare reused an artifact (backends/artifacts.py
        records {"artifact": {"reused": ...}} in the details)."""
        return artifact_reused(self.details)

    @property
    def valid(self) -> bool:
        return self.status in VALID_STATUSES

    @property
    def owed(self) -> bool:
        """Whether a resume runs this repetition again: interrupted, or a sweep that kept
        finished rates (details["rates_kept"]) and goes on from them."""
        return self.status == "interrupted" or (
            not self.valid and bool(self.details.get("rates_kept"))
        )

    @property
    def trusted(self) -> bool:
        return self.status in TRUSTED_STATUSES


def headline(reason: str) -> str:
    """The line of a (possibly multi-line) reason a table shows, whole: a compiler's
    "error:" line if there is one, else the last non-empty line. The store keeps it all."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    if not lines:
        return ""
    # The first line names the exception ("RuntimeError: ..."): a diagnostic comes later.
    return next((line for line in lines[1:] if "error:" in line.lower()), lines[-1])


def artifact_reused(details: Mapping[str, Any]) -> bool:
    """Whether a prepare reused an artifact, from the details backends/artifacts.py records
    ({"artifact": {"reused": ...}}): read here, below the backends that write it."""
    artifact = details.get("artifact")
    return bool(isinstance(artifact, Mapping) and artifact.get("reused"))
