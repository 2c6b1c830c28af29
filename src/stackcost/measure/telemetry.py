"""The telemetry record: what the side-channel sampler saw over one window.

A schema only, so that results can hold it without importing the sampler's client; the
summary that fills it is stackcost.measure.sampler.summarize.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

# "Other processes' CPU" above this (in cores, averaged over the window) flags the machine
# as busy: a quarter of a core taken from a 2-core box moves medians by several percent.
BUSY_OTHER_CORES = 0.25


class RaplStatus(BaseModel):
    available: bool
    reason: str | None = None
    zones: list[str] = Field(default_factory=list)


class Telemetry(BaseModel):
    """The sampler's record restricted to one window (e.g. the timed loop).

    CPU figures are in cores (1.93 = 1.93 CPUs busy on average).
    cpu_util_percent_of_threads is of the cell's threads when given (100% = every
    thread busy all the time), else of all logical CPUs; cpu_util_percent_basis says
    which. other_busy_cores_mean is system busy minus the target and minus the
    sampler itself, clamped at 0; above BUSY_OTHER_CORES the machine counts as busy.
    """

    interval_s: float
    n_samples: int  # samples taken inside the window
    gap_max_s: float | None = None  # longest gap between samples (late wake-ups)
    sched: str | None = None  # the sampler's scheduling: "idle" (SCHED_IDLE) or "normal"
    # Where the CPU means come from: the measured process's own counters read at the
    # window's edges (exact), or the samples interpolated to the edges.
    means_from: str = "samples, interpolated to the window's edges"
    window_s: float  # the window asked for
    covered_s: float  # the part of it the samples span (== window_s normally)
    logical_cpus: int
    threads: int | None = None
    cpu_util_cores_mean: float
    cpu_util_cores_max: float  # over spans >= sampler.MAX_SPAN_S (ticks are 10 ms)
    cpu_util_percent_of_threads: float
    cpu_util_percent_basis: str
    rss_peak_bytes: int  # target + descendants, summed (shared pages counted per process)
    system_busy_cores_mean: float
    sampler_cores_mean: float
    other_busy_cores_mean: float
    loadavg_1m: float
    busy_machine: bool  # other_busy_cores_mean > BUSY_OTHER_CORES
    busy_threshold_cores: float = BUSY_OTHER_CORES
    gpu: list[dict[str, Any]] | None = None
    gpu_reason: str | None = None
    rapl: RaplStatus
    clock: str = "CLOCK_MONOTONIC (time.monotonic_ns)"
