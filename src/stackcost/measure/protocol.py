"""The measurement protocol for one repetition: cold call, warmup until stable,
timed iterations until the stop rule holds or the time cap is hit."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stackcost.measure.counters import Edge, Window
from stackcost.measure.memory import rss_bytes
from stackcost.measure.stats import Stats, summarize
from stackcost.measure.timer import CpuTimer, CudaTimer, Step


class Protocol(BaseModel):
    """Stop rule and warmup settings; stored with every run."""

    # A misspelt key in a spec is an error; NaN or inf would pass every comparison it meets.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_time_s: float = Field(1.0, ge=0)
    min_iters: int = Field(10, ge=1)
    max_time_s: float = Field(20.0, gt=0)  # cap on the timed phase; hitting it => unstable
    max_iters: int = Field(100_000, ge=1)  # bounds stored samples for sub-microsecond steps
    target_ci: float = Field(0.02, gt=0)  # stop when the median's CI is within +/- this
    confidence: float = Field(0.95, gt=0, lt=1)
    warmup_tolerance: float = Field(0.05, gt=0)  # consecutive window medians within 5%
    warmup_max_time_s: float = Field(10.0, ge=0)
    check_interval_s: float = Field(0.05, gt=0)  # how often the stop rule is evaluated


@dataclass
class Measurement:
    cold_ns: int
    output: Any
    warmup_iters: int = 0
    warmup_s: float = 0.0
    warmup_settled: bool = True
    samples_ns: list[int] = field(default_factory=list)
    timed_s: float = 0.0
    stats: Stats | None = None
    stop_reason: str = ""
    # RSS at each stop-rule check and the sample count then: the leak check's input.
    rss_trace_bytes: list[int] = field(default_factory=list)
    rss_trace_iters: list[int] = field(default_factory=list)
    # The timed loop's edges with its CPU counters (exact utilization; see counters.py).
    window: Window | None = None
    # Minor page faults per timed step: pages the allocator handed out afresh (see
    # stackcost.allocators); None where not counted (a native program's loop).
    page_faults_per_step: float | None = None

    @property
    def unstable(self) -> bool:
        return self.stop_reason in ("time cap", "iteration cap") or not self.warmup_settled


def _window(estimate_ns: float, seconds: float, floor: int) -> int:
    """How many iterations fill `seconds`, given a per-step estimate."""
    return max(floor, math.ceil(seconds * 1e9 / max(estimate_ns, 1.0)))


def cold_call(
    step: Step, timer: CpuTimer | CudaTimer, keep: Callable[[Any], Any] | None = None
) -> Measurement:
    """The first call, timed; its output is held for verification after the loop, through
    `keep` (outside the clock) where the step hands back buffers the next call reuses."""
    cold_ns, output = timer.time_once(step)
    return Measurement(cold_ns=cold_ns, output=keep(output) if keep else output)


def warm_up(step: Step, timer: CpuTimer | CudaTimer, p: Protocol, m: Measurement) -> None:
    """Run windows of iterations until two consecutive window medians agree."""
    start = time.perf_counter()
    estimate = float(m.cold_ns)
    previous: float | None = None
    m.warmup_settled = False
    while True:
        samples: list[int] = []
        timer.run(step, _window(estimate, p.check_interval_s, 2), samples)
        m.warmup_iters += len(samples)
        current = statistics.median(samples)
        estimate = current
        if previous is not None and abs(current - previous) <= p.warmup_tolerance * previous:
            m.warmup_settled = True
            break
        previous = current
        if time.perf_counter() - start >= p.warmup_max_time_s:
            break
    m.warmup_s = time.perf_counter() - start


def timed_loop(step: Step, timer: CpuTimer | CudaTimer, p: Protocol, m: Measurement) -> None:
    """Time iterations in batches; evaluate the stop rule between batches only.

    Batches grow with the sample count (at least a quarter of it), so the O(n log n)
    summary behind the stop rule stays a small, bounded share of the loop's time.
    """
    samples = m.samples_ns
    first = Edge.now()
    start = time.perf_counter()
    estimate = float(m.cold_ns)
    while True:
        batch = max(_window(estimate, p.check_interval_s, 1), len(samples) // 4)
        # ...but never much past the time cap: growth must not overshoot it by a batch.
        left = p.max_time_s - (time.perf_counter() - start)
        batch = min(batch, max(1, math.ceil(left * 1e9 / max(estimate, 1.0))))
        timer.run(step, min(p.max_iters - len(samples), batch), samples)
        elapsed = time.perf_counter() - start
        estimate = statistics.median(samples[-64:])
        m.rss_trace_bytes.append(rss_bytes())  # ~10 us, between batches only
        m.rss_trace_iters.append(len(samples))
        at_cap = len(samples) >= p.max_iters
        if len(samples) >= p.min_iters and (elapsed >= p.min_time_s or at_cap):
            stats = summarize(samples, p.confidence)
            if stats.ci_half_width_rel <= p.target_ci:
                m.stop_reason = "converged"
                break
        if at_cap:
            m.stop_reason = "iteration cap"
            break
        if elapsed >= p.max_time_s and len(samples) >= min(p.min_iters, 3):
            m.stop_reason = "time cap"
            break
    m.timed_s = time.perf_counter() - start
    m.window = Window.between(first, Edge.now())
    m.stats = summarize(samples, p.confidence)
    if m.window.page_faults is not None and samples:
        m.page_faults_per_step = m.window.page_faults / len(samples)


def measure(
    step: Step, timer: CpuTimer | CudaTimer, p: Protocol, keep: Callable[[Any], Any] | None = None
) -> Measurement:
    m = cold_call(step, timer, keep)
    warm_up(step, timer, p, m)
    timed_loop(step, timer, p, m)
    return m
