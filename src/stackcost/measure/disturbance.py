"""Disturbance: how much CPU other processes took while the timed loop ran.

The measured process reads two counters at its timed loop's first and last instant
(measure/counters.py in Python, `Edge` in the C++ programs): the busy time of the CPUs
it may run on (/proc/stat: all of them, or only the cores it is pinned to) and its own
CPU time. Their difference is what everything else used of those CPUs over exactly that
window, in cores. A repetition whose others took
more than THRESHOLD_CORES is `disturbed`, never `ok`: its median may be skewed.

/proc/stat counts in clock ticks (10 ms) per CPU, so over a short window the estimate
is uncertain by up to two ticks per CPU; that slack is added to the threshold, which
makes very short loops (well under a second) less sensitive, never falsely disturbed.
The 1-minute load average is recorded beside it as context only: it includes the
measured process's own threads and lags by a minute, so it decides nothing.

On a virtual machine the hypervisor may run another guest while one of ours is runnable:
/proc/stat counts that as the CPU's steal time. It takes the measured cores away just as
another process does, so it is read over the same window, kept apart from other processes'
CPU (`steal_cores`; `others_cores` excludes it where it was read, and includes it in runs
stored before), and judged with them: a repetition is `disturbed` when other processes and
steal together took more than the threshold, so steal alone above it is enough, and the
reason names it. Also over the window, as context only: the measured process's involuntary
context switches (its threads preempted: by other processes, which others_cores already
judges, but also by its own threads outnumbering its cores, which is the step's own
business, so no count is a principled criterion) and the CPUs' frequency at both edges
(often fixed or absent on VMs; a drop between the edges can explain a slow repetition, but
turbo and idle states make any threshold arbitrary).
"""

from __future__ import annotations

import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from stackcost.measure.counters import TICK_S, Edge, Window, pinned_cpus

# Others' mean CPU over the timed loop above which a repetition is disturbed. A quarter
# of a core: well above the idle noise seen here (< 0.05 core), well below one busy
# process (1 core), which skewed a 2-thread median by 1.3x-290x (docs/concepts.md).
# Steal is judged with others, by the same threshold: a quarter of a core stolen by the
# hypervisor is a quarter of a core the step did not get, whoever took it.
THRESHOLD_CORES = 0.25
# --on-disturbed: what the runner does with a disturbed repetition.
POLICIES: tuple[str, ...] = ("retry", "keep", "fail")
# retry: this many more tries, each after waiting for a quiet machine (a quiet second,
# or QUIET_MAX_WAIT_S, whichever comes first).
MAX_RETRIES = 2
QUIET_WINDOW_S = 1.0
QUIET_MAX_WAIT_S = 10.0


class Attempt(BaseModel):
    """An earlier, disturbed try of the same repetition, which a retry replaced."""

    others_cores: float
    median_ms: float | None = None
    finished_at: str | None = None


class Disturbance(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    others_cores: float  # other processes' mean CPU over the timed loop, in cores
    own_cores: float  # the measured process's own mean CPU over the same window
    window_s: float
    threshold_cores: float  # THRESHOLD_CORES plus the tick slack for this window
    loadavg_1m: float | None = None  # at the loop's end: context, not a criterion
    disturbed: bool
    # Earlier disturbed tries of this repetition that --on-disturbed retry replaced.
    attempts: list[Attempt] = Field(default_factory=list)
    # Read since stackcost recorded them; None where unread (results stored before, a C++
    # program built before, a machine without the counter), and then left out when the
    # result is written, so older results' JSON and views stay as they were.
    steal_cores: float | None = None  # the hypervisor's mean steal of the counted CPUs, cores
    involuntary_switches: int | None = None  # the measured process's, count: context only
    involuntary_switches_per_s: float | None = None  # the same, per second of the window
    cpu_mhz_start: float | None = None  # counted CPUs' mean frequency at the first edge, MHz
    cpu_mhz_end: float | None = None  # ...and at the last: context only

    @model_serializer(mode="wrap")
    def _unread_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in UNREAD_LEFT_OUT:
            if data.get(name, 0) is None:
                del data[name]
        return data

    def reason(self) -> str:
        others = f"other processes used {self.others_cores:.2f} cores"
        steal = self.steal_cores or 0.0
        if steal > self.threshold_cores - THRESHOLD_CORES:  # beyond the ticks' rounding
            stolen = f"the hypervisor's steal took {steal:.2f} cores"
            taken = (
                f"{stolen} and {others}" if steal > self.others_cores else f"{others} and {stolen}"
            )
        else:
            taken = others
        return (
            f"disturbed: {taken} during the timed loop (threshold "
            f"{self.threshold_cores:.2f}); its numbers are kept but not trusted"
        )


UNREAD_LEFT_OUT = (
    "steal_cores",
    "involuntary_switches",
    "involuntary_switches_per_s",
    "cpu_mhz_start",
    "cpu_mhz_end",
)


def tick_slack_cores(window_s: float, cpus: int) -> float:
    """How far /proc/stat's tick counting can be off over `window_s`, in cores."""
    return 2 * cpus * TICK_S / window_s if window_s > 0 else float("inf")


def assess(window: Window, cpus: int | None = None) -> Disturbance | None:
    """The disturbance over a timed loop; None where /proc/stat could not be read.
    `cpus`: how many CPUs the window's busy time counts (default: those this process is
    pinned to, else all)."""
    if window.system_busy_s is None or window.end_ns <= window.start_ns:
        return None
    cpus = cpus or len(pinned_cpus() or ()) or os.cpu_count() or 1
    seconds = (window.end_ns - window.start_ns) / 1e9
    # Busy time includes steal: what is left after steal and our own CPU is others'.
    stolen_s = window.steal_s
    steal = None if stolen_s is None else max(0.0, stolen_s / seconds)
    others = max(0.0, (window.system_busy_s - (stolen_s or 0.0) - window.cpu_s) / seconds)
    # Steal and busy are both counted in ticks: the tick slack covers their rounding too.
    threshold = THRESHOLD_CORES + tick_slack_cores(seconds, cpus)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    switches = window.involuntary_switches
    return Disturbance(
        others_cores=round(others, 4),
        own_cores=round(window.cpu_s / seconds, 4),
        window_s=seconds,
        threshold_cores=round(threshold, 4),
        loadavg_1m=load,
        disturbed=others + (steal or 0.0) > threshold,
        steal_cores=None if steal is None else round(steal, 4),
        involuntary_switches=switches,
        involuntary_switches_per_s=None if switches is None else round(switches / seconds, 2),
        cpu_mhz_start=_mhz(window.cpu_mhz_start),
        cpu_mhz_end=_mhz(window.cpu_mhz_end),
    )


def _mhz(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def wait_for_quiet(
    window_s: float = QUIET_WINDOW_S,
    max_wait_s: float = QUIET_MAX_WAIT_S,
    cpus: frozenset[int] | None = None,
) -> float | None:
    """Wait until other processes use less than THRESHOLD_CORES of `cpus` (default: the
    CPUs this thread may run on) over one window (this process is idle meanwhile, so all
    busy time but its own is others', steal included); give up after max_wait_s. Returns
    the last window's others' cores with steal, None without /proc/stat."""
    deadline = time.monotonic() + max_wait_s
    counted = cpus or pinned_cpus()
    while True:
        first = Edge.now(counted)
        time.sleep(window_s)
        d = assess(Window.between(first, Edge.now(counted)), len(counted or ()) or None)
        taken = None if d is None else d.others_cores + (d.steal_cores or 0.0)
        if taken is None or taken <= THRESHOLD_CORES or time.monotonic() >= deadline:
            return taken
