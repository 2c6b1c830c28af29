"""Cumulative CPU counters read at the edges of the timed loop.

The side-channel sampler yields to the workload (SCHED_IDLE), so while every core is busy
its samples can be a few hundred ms apart, and a mean interpolated between them blurs
whatever changed inside the gap. Read at the loop's first and last instant instead, the
same counters give exact means: the measured process's CPU time (CLOCK_PROCESS_CPUTIME_ID,
all its threads, ns resolution) and the system's busy time (/proc/stat, 10 ms ticks).
Each read costs ~10 us and happens outside the timed iterations.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def busy_from_stat_line(line: bytes) -> float:
    """Busy CPU seconds from /proc/stat's first line: all but idle and iowait (guest time
    is already inside user and nice, so it is not added again)."""
    v = [int(x) for x in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(v) - v[3] - v[4]) * TICK_S


def system_busy_s() -> float | None:
    """Busy seconds over all CPUs since boot; None where /proc/stat does not exist."""
    try:
        with open("/proc/stat", "rb") as f:
            return busy_from_stat_line(f.readline())
    except OSError:
        return None


@dataclass(frozen=True)
class Edge:
    """The counters at one instant of the timed loop."""

    t_ns: int  # time.monotonic_ns(): CLOCK_MONOTONIC, the sampler's clock
    cpu_s: float  # this process's CPU time, all threads
    system_busy_s: float | None

    @classmethod
    def now(cls) -> Edge:
        return cls(time.monotonic_ns(), time.process_time(), system_busy_s())

    @classmethod
    def with_children(cls) -> Edge:
        """As now(), with the CPU time of reaped children added: the edges of a window in
        which a child program (a C++ training run) did the work."""
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(
            time.monotonic_ns(),
            time.process_time() + children.ru_utime + children.ru_stime,
            system_busy_s(),
        )


@dataclass(frozen=True)
class Window:
    """The timed loop on CLOCK_MONOTONIC, with the measured process's CPU time and the
    system's busy time spent inside it."""

    start_ns: int
    end_ns: int
    cpu_s: float
    system_busy_s: float | None

    @classmethod
    def between(cls, start: Edge, end: Edge) -> Window:
        busy = None
        if start.system_busy_s is not None and end.system_busy_s is not None:
            busy = end.system_busy_s - start.system_busy_s
        return cls(start.t_ns, end.t_ns, end.cpu_s - start.cpu_s, busy)
