"""Cumulative CPU counters read at the edges of the timed loop.

The side-channel sampler yields to the workload (SCHED_IDLE), so while every core is busy
its samples can be a few hundred ms apart, and a mean interpolated between them blurs
whatever changed inside the gap. Read at the loop's first and last instant instead, the
same counters give exact means: the measured process's CPU time (CLOCK_PROCESS_CPUTIME_ID,
all its threads, ns resolution) and the busy time of the CPUs it may run on (/proc/stat,
10 ms ticks). Each read costs ~10 us and happens outside the timed iterations.

A process pinned to some cores (a repetition on a Ray node, execute/cores.py) counts only
those cores' lines: a measurement pinned to the next cores is not its disturbance. An
unpinned process counts the first line, all CPUs, as before.
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


def descendant_pids(pid: int) -> set[int] | None:
    """Every live descendant of `pid`, through each thread's /proc children file (~25 us);
    None where the kernel lacks those files (CONFIG_PROC_CHILDREN)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    kids = {int(k) for k in f.read().split()}
            except FileNotFoundError:
                if os.path.exists(f"/proc/{parent}/task/{tid}"):
                    return None  # the thread is there, its children file is not
                continue  # the thread exited
            except OSError:
                continue
            todo += kids - found
            found |= kids
    return found


def stat_fields(raw: bytes) -> list[bytes]:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses):
    [0] state, [11] utime, [12] stime, [13] cutime, [14] cstime, [21] rss (pages)."""
    return raw[raw.rindex(b")") + 2 :].split()


def family_cpu_s() -> float:
    """This process's CPU time with its descendants': the reaped (RUSAGE_CHILDREN, e.g. the
    compiler Inductor ran) and the live ones of its process group (e.g. a compile-worker
    pool), whose own reaped children are in their cutime. Their work is the cell's, not
    another process's. The --profile sampler runs in a group of its own: not counted."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + children.ru_utime + children.ru_stime
    group, ticks = os.getpgrp(), 0
    for pid in descendant_pids(os.getpid()) or ():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = stat_fields(f.read())
        except (OSError, ValueError):
            continue  # exited between the listing and the read: now in RUSAGE_CHILDREN
        if int(fields[2]) == group:
            ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total + ticks * TICK_S


def pinned_cpus() -> frozenset[int] | None:
    """The CPUs this thread may run on when that is fewer than the machine's online ones
    (pinned); None when it may run on all of them."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = frozenset(os.sched_getaffinity(0))
    return allowed if len(allowed) < (os.cpu_count() or 0) else None


def system_busy_s(cpus: frozenset[int] | None = None) -> float | None:
    """Busy seconds since boot over all CPUs, or over `cpus` only (their per-CPU lines);
    None where /proc/stat does not exist."""
    try:
        with open("/proc/stat", "rb") as f:
            if cpus is None:
                return busy_from_stat_line(f.readline())
            names = {b"cpu%d" % cpu for cpu in cpus}
            return sum(busy_from_stat_line(line) for line in f if line.split(b" ", 1)[0] in names)
    except OSError:
        return None


@dataclass(frozen=True)
class Edge:
    """The counters at one instant of the timed loop."""

    t_ns: int  # time.monotonic_ns(): CLOCK_MONOTONIC, the sampler's clock
    cpu_s: float  # this process's CPU time, all threads, with its descendants'
    system_busy_s: float | None  # over the CPUs it may run on (all, when unpinned)

    @classmethod
    def now(cls, cpus: frozenset[int] | None = None) -> Edge:
        """`cpus`: the CPUs whose busy time counts (default: those this thread is pinned
        to, or all when it is not)."""
        return cls(time.monotonic_ns(), family_cpu_s(), system_busy_s(cpus or pinned_cpus()))


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
