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
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel, ConfigDict, Field

from stackcost.measure.counters import TICK_S, Edge, Window, pinned_cpus

# Others' mean CPU over the timed loop above which a repetition is disturbed. A quarter
# of a core: well above the idle noise seen here (< 0.05 core), well below one busy
# process (1 core), which skewed a 2-thread median by 1.3x-290x (see the README).
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

    def reason(self) -> str:
        return (
            f"disturbed: other processes used {self.others_cores:.2f} cores during the timed "
            f"loop (threshold {self.threshold_cores:.2f}); its numbers are kept but not trusted"
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
    others = max(0.0, (window.system_busy_s - window.cpu_s) / seconds)
    threshold = THRESHOLD_CORES + tick_slack_cores(seconds, cpus)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return Disturbance(
        others_cores=round(others, 4),
        own_cores=round(window.cpu_s / seconds, 4),
        window_s=seconds,
        threshold_cores=round(threshold, 4),
        loadavg_1m=load,
        disturbed=others > threshold,
    )


def wait_for_quiet(
    window_s: float = QUIET_WINDOW_S,
    max_wait_s: float = QUIET_MAX_WAIT_S,
    cpus: frozenset[int] | None = None,
) -> float | None:
    """Wait until other processes use less than THRESHOLD_CORES of `cpus` (default: the
    CPUs this thread may run on) over one window (this process is idle meanwhile, so all
    busy time but its own is others'); give up after max_wait_s. Returns the last
    window's others' cores, None without /proc/stat."""
    deadline = time.monotonic() + max_wait_s
    counted = cpus or pinned_cpus()
    while True:
        first = Edge.now(counted)
        time.sleep(window_s)
        d = assess(Window.between(first, Edge.now(counted)), len(counted or ()) or None)
        if d is None or d.others_cores <= THRESHOLD_CORES or time.monotonic() >= deadline:
            return None if d is None else d.others_cores
