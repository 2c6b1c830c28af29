"""What a run asks of LoadGen, and the TestSettings it becomes in the worker.

A spec holds one LoadGenSettings; each scenario cell gets the ScenarioConfig made from it
(only the settings that scenario reads). The worker turns that config, plus a calibration
of the prepared step (its warm latency), into mlperf_loadgen.TestSettings. What differs
between LoadGen's scenarios is data, one LoadGenKind each in KINDS: no code asks which
scenario it holds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stackcost.cell import GENERATE, SCENARIOS, ScenarioConfig
from stackcost.errors import SpecError

# The scenario name that means "no LoadGen: stackcost's own timed loop" (the default).
TIMED_LOOP = "timed-loop"
# generate is token generation (mode generate, scenarios/generate.py), not a LoadGen scenario;
# serve is generation under a request-rate sweep (scenarios/serve.py), not LoadGen's either.
SERVE = "serve"
SCENARIO_CHOICES: tuple[str, ...] = (TIMED_LOOP, *SCENARIOS, GENERATE, SERVE)

# Server's peak search starts here, as a fraction of what the instances sustain back to
# back: FindPeakPerformance needs a start that meets the bound (it only searches upward),
# and LoadGen's per-query cost is not in the calibration. A start that breaks the bound is
# tried again this many times lower, at most SERVER_START_TRIES times in all. A try
# lasts at least min_query_count / QPS: eager resnet18 (14 ms a step) took 436 s with 3
# tries 4x apart (the last at 1 QPS) and still broke a 50 ms bound, so the search stops
# sooner: one more try, 2x lower, and the cell is INVALID with LoadGen's reason.
SERVER_START_FRACTION = 0.25
SERVER_START_BACKOFF = 2.0
SERVER_START_TRIES = 2
# Offline: LoadGen sizes its one query as 1.1 x expected QPS x min duration; a query
# finished before min duration is INVALID, so the expectation is set above the estimate.
OFFLINE_OVERESTIMATE = 1.25
# The peak is searched to about 1% of the starting QPS (LoadGen's precision is in decimals).
SERVER_RELATIVE_PRECISION = 0.01


# Bounds of the durations LoadGen is given (it takes them as integer ns and ms).
MAX_LATENCY_BOUND_MS = 3_600_000.0  # an hour
MAX_MIN_DURATION_MS = 86_400_000  # a day


class LoadGenSettings(BaseModel):
    """The LoadGen knobs of a run (flags or a spec's `loadgen:`); each applies to the
    scenarios that read it. None: not given, so DEFAULTS holds (a knob given without a
    scenario that reads it is refused, even at its default value)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    latency_bound_ms: float | None = Field(None, gt=0, le=MAX_LATENCY_BOUND_MS)  # server: p99
    # server serving generated tokens (mode generate): p99 time to first token, and p99
    # time per output token
    ttft_bound_ms: float | None = Field(None, gt=0, le=MAX_LATENCY_BOUND_MS)
    tpot_bound_ms: float | None = Field(None, gt=0, le=MAX_LATENCY_BOUND_MS)
    samples_per_query: int | None = Field(None, ge=1, le=1_000_000)  # multi-stream
    instances: int | None = Field(None, ge=1, le=64)  # server, offline
    min_duration_ms: int | None = Field(None, ge=0, le=MAX_MIN_DURATION_MS)
    # None: the scenario's early-stopping minimum, so a clean run can be VALID.
    min_query_count: int | None = Field(None, ge=1, le=1_000_000_000)

    def value(self, key: str) -> Any:
        given = getattr(self, key)
        return DEFAULTS.get(key) if given is None else given

    def config(self, name: str, tokens: bool = False) -> ScenarioConfig:
        """The cell-identity config of scenario `name`: only the settings it reads. With
        `tokens` (a generate cell, scenarios/token_serving.py) a bound is on TTFT and TPOT,
        not on the query's latency."""
        kind = KINDS[name]
        bound, token_bounds = kind.reads_bound and not tokens, kind.reads_bound and tokens
        return ScenarioConfig(
            name=name,  # type: ignore[arg-type]
            latency_bound_ms=self.value("latency_bound_ms") if bound else None,
            ttft_bound_ms=self.value("ttft_bound_ms") if token_bounds else None,
            tpot_bound_ms=self.value("tpot_bound_ms") if token_bounds else None,
            samples_per_query=self.value("samples_per_query") if kind.reads_samples else None,
            instances=self.value("instances") if kind.reads_instances else 1,
            min_duration_ms=self.value("min_duration_ms"),
            min_query_count=self.min_query_count or kind.early_stopping_queries,
        )


# Defaults that keep a small model's run to seconds on 2 cores; 8 samples a query is MLPerf's,
# and so are the token bounds (llama2-70b's Server: TTFT 2 s, TPOT 200 ms).
DEFAULTS: dict[str, Any] = {
    "latency_bound_ms": 50.0,
    "ttft_bound_ms": 2000.0,
    "tpot_bound_ms": 200.0,
    "samples_per_query": 8,
    "instances": 1,
    "min_duration_ms": 2000,
}


def parse_duration_ms(text: str, what: str, maximum_ms: float) -> float:
    """'50ms', '0.05s' or '2s', as ms, in (0, maximum_ms]. The unit is required: a bare
    number is ms to one reader and seconds to another."""
    shown = repr(str(text)[:40])
    match = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)?\s*", str(text))
    if not match:
        raise SpecError(f"{what} {shown} is not a duration (e.g. 50ms, 0.5s)")
    if match[2] is None:
        raise SpecError(f"{what} {shown} needs a unit: {match[1]}ms or {match[1]}s")
    value = float(match[1]) * (1000.0 if match[2] == "s" else 1.0)
    if not (math.isfinite(value) and 0 < value <= maximum_ms):
        raise SpecError(
            f"{what} {shown} must be a positive duration of at most {maximum_ms / 1000:g}s"
        )
    return value


def peak_precision(start_qps: float) -> int:
    """LoadGen's decimals of QPS precision that resolve ~1% of `start_qps` (0 at >= 100)."""
    step = max(start_qps * SERVER_RELATIVE_PRECISION, 1e-6)
    return max(0, min(6, math.ceil(-math.log10(step))))


def planned(config: ScenarioConfig, step_ns: float) -> dict[str, Any]:
    """The numbers LoadGen is told, from the calibrated warm latency of one step: recorded
    with the result (they are not part of the cell: they follow from the measurement)."""
    step_ns = max(step_ns, 1.0)
    return {"calibrated_step_ms": step_ns / 1e6, **KINDS[config.name].expect(config, step_ns)}


def test_settings(config: ScenarioConfig, plan: dict[str, Any]) -> Any:
    """mlperf_loadgen.TestSettings for `config`, with the calibrated numbers of `plan`."""
    import mlperf_loadgen as lg

    kind = KINDS[config.name]
    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, kind.test_scenario)
    # Server's answer is the highest QPS under the bound: LoadGen's own peak search.
    ts.mode = lg.TestMode.FindPeakPerformance if kind.find_peak else lg.TestMode.PerformanceOnly
    ts.min_duration_ms = config.min_duration_ms
    ts.min_query_count = config.min_query_count
    if config.samples_per_query is not None:
        ts.multi_stream_samples_per_query = config.samples_per_query
    if config.latency_bound_ms is not None:
        ts.server_target_latency_ns = int(config.latency_bound_ms * 1e6)
    if config.ttft_bound_ms is not None:
        ts.ttft_latency = int(config.ttft_bound_ms * 1e6)
    if config.tpot_bound_ms is not None:
        ts.tpot_latency = int(config.tpot_bound_ms * 1e6)
    for key, value in plan.items():
        if key not in ("calibrated_step_ms", "attempt"):
            setattr(ts, key, value)
    return ts


def _rate(config: ScenarioConfig, step_ns: float) -> float:
    """Steps/s the instances sustain back to back."""
    return config.instances * 1e9 / step_ns


def _single_stream(config: ScenarioConfig, step_ns: float) -> dict[str, Any]:
    return {"single_stream_expected_latency_ns": int(step_ns)}


def _multi_stream(config: ScenarioConfig, step_ns: float) -> dict[str, Any]:
    return {"multi_stream_expected_latency_ns": int(step_ns * (config.samples_per_query or 1))}


def _server(config: ScenarioConfig, step_ns: float) -> dict[str, Any]:
    start = _rate(config, step_ns) * SERVER_START_FRACTION
    return {
        "server_target_qps": start,
        "server_find_peak_qps_decimals_of_precision": peak_precision(start),
    }


def _offline(config: ScenarioConfig, step_ns: float) -> dict[str, Any]:
    return {"offline_expected_qps": _rate(config, step_ns) * OFFLINE_OVERESTIMATE}


@dataclass(frozen=True)
class LoadGenKind:
    """One LoadGen scenario as data: the settings it reads, what LoadGen is told, how
    often it is tried, and the headline MLPerf reports for it."""

    name: str
    test_scenario: str  # the mlperf_loadgen.TestScenario member
    # Queries LoadGen's early stopping needs, with no query over the bound, to call a run
    # VALID (measured with LoadGen 6.0.17). Below them a run is INVALID however fast it is.
    early_stopping_queries: int
    expect: Callable[[ScenarioConfig, float], dict[str, Any]]  # from the warm step's ns
    metric: str  # the headline: "p90 latency", "QPS at bound", ...
    unit: str  # "ms", "QPS", "samples/s"
    summary_key: str | None  # the summary line it comes from; None: the detail log's peak
    # Its headline when it serves generated tokens (metric, unit, summary key), as MLPerf's
    # LLM benchmarks report it; None: it does not serve them (token_serving.py).
    tokens: tuple[str, str, str | None] | None = None
    reads_bound: bool = False  # latency_bound_ms
    reads_samples: bool = False  # samples_per_query
    reads_instances: bool = False  # instances serving concurrently
    find_peak: bool = False  # LoadGen searches the highest QPS under the bound
    tries: int = 1  # starts of the peak search (each lower than the last)
    # LoadGen issues the next query only once this one is complete: one instance can
    # answer inline, on LoadGen's own thread.
    streams: bool = False


KINDS: dict[str, LoadGenKind] = {
    k.name: k
    for k in (
        LoadGenKind(
            "single-stream",
            "SingleStream",
            64,
            _single_stream,
            "p90 latency",
            "ms",
            "90.0th percentile latency (ns)",
            streams=True,
        ),
        LoadGenKind(
            "multi-stream",
            "MultiStream",
            662,
            _multi_stream,
            "p99 latency",
            "ms",
            "99.0th percentile latency (ns)",
            reads_samples=True,
            streams=True,
        ),
        LoadGenKind(
            "server",
            "Server",
            459,
            _server,
            "QPS at bound",
            "QPS",
            None,
            tokens=("QPS at TTFT and TPOT bounds", "QPS", None),
            reads_bound=True,
            reads_instances=True,
            find_peak=True,
            tries=SERVER_START_TRIES,
        ),
        LoadGenKind(
            "offline",
            "Offline",
            1,
            _offline,
            "throughput",
            "samples/s",
            "Samples per second",
            tokens=("token throughput", "tokens/s", "Tokens per second"),
            reads_instances=True,
        ),
    )
}
