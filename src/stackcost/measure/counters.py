"""Cumulative CPU counters read at the edges of the timed loop.

The side-channel sampler yields to the workload (SCHED_IDLE), so while every core is busy
its samples can be a few hundred ms apart, and a mean interpolated between them blurs
whatever changed inside the gap. Read at the loop's first and last instant instead, the
same counters give exact means: the measured process's CPU time (CLOCK_PROCESS_CPUTIME_ID,
all its threads, ns resolution) and the busy time of the CPUs it may run on (/proc/stat,
10 ms ticks). Each read costs ~10 us and happens outside the timed iterations.

Beside them, read at the same instants: the hypervisor's steal time of those CPUs (the same
/proc/stat lines, 8th column), the process's involuntary context switches (getrusage, one
syscall, ~2 us), its minor page faults (getrusage's ru_minflt: pages its allocator handed
out afresh, see stackcost.allocators) and the CPUs' current frequency where the machine
measures it (cpufreq in sysfs, else /proc/cpuinfo's sampled "cpu MHz"; None on VMs,
which show a fixed one).

A process pinned to some cores (a repetition on a Ray node, execute/cores.py) counts only
those cores' lines: a measurement pinned to the next cores is not its disturbance. An
unpinned process counts the first line, all CPUs, as before.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import TypeVar

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_N = TypeVar("_N", int, float)


def busy_from_stat_line(line: bytes) -> float:
    """Busy CPU seconds from /proc/stat's first line: all but idle and iowait (guest time
    is already inside user and nice, so it is not added again). Steal is busy time too: the
    CPU was wanted and the hypervisor ran something else."""
    v = [int(x) for x in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(v) - v[3] - v[4]) * TICK_S


def steal_from_stat_line(line: bytes) -> float:
    """Steal seconds from a /proc/stat cpu line: the 8th value, time this (virtual) CPU was
    runnable but the hypervisor ran another guest. 0 on kernels that predate the column."""
    v = line.split()[1:9]
    return int(v[7]) * TICK_S if len(v) > 7 else 0.0


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


def stat_lines(stat: bytes | list[bytes], cpus: frozenset[int] | None = None) -> list[bytes]:
    """The cpu lines of /proc/stat that count: the first (all CPUs), or `cpus`' own."""
    lines = stat.splitlines() if isinstance(stat, bytes) else stat
    if cpus is None:
        return lines[:1]
    names = {b"cpu%d" % cpu for cpu in cpus}
    return [line for line in lines if line.split(b" ", 1)[0] in names]


def system_times(cpus: frozenset[int] | None = None) -> tuple[float, float] | None:
    """(busy, steal) seconds since boot over all CPUs, or over `cpus` only (their per-CPU
    lines); None where /proc/stat does not exist. Busy includes steal."""
    try:
        with open("/proc/stat", "rb") as f:
            lines = stat_lines([f.readline()] if cpus is None else f.readlines(), cpus)
    except OSError:
        return None
    return (
        sum(busy_from_stat_line(line) for line in lines),
        sum(steal_from_stat_line(line) for line in lines),
    )


def system_busy_s(cpus: frozenset[int] | None = None) -> float | None:
    """Busy seconds since boot over all CPUs, or over `cpus` only (their per-CPU lines);
    None where /proc/stat does not exist."""
    times = system_times(cpus)
    return None if times is None else times[0]


def involuntary_switches() -> int:
    """This process's involuntary context switches so far, all its threads, with its reaped
    children's: the kernel preempted them (time slice used up, a higher-priority task woke)
    rather than them waiting. getrusage(RUSAGE_SELF) rather than the sum of
    /proc/self/task/*/status `nonvoluntary_ctxt_switches`: it is that same sum (the kernel
    adds each live thread's count to what exited threads left), in one ~2 us syscall, where
    the files cost ~45 us a thread (a 64-thread pool: ~3 ms an edge) and lose a thread that
    exits between the edges, which can make the difference negative. The threads are the
    measuring process's own: the step's framework pools and the interpreter. Reaped
    children (RUSAGE_CHILDREN) count as in family_cpu_s: a C++ training program this
    process waited for is the measurement. Live descendants and the --profile sampler (its
    own process) are not counted."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    return own + resource.getrusage(resource.RUSAGE_CHILDREN).ru_nivcsw


def mhz_from_cpuinfo(text: bytes, cpus: frozenset[int] | None = None) -> float | None:
    """Mean "cpu MHz" of /proc/cpuinfo's processors (of `cpus` only, when given); None
    where it lists none (arm64, some VMs)."""
    found: list[float] = []
    processor = -1
    for line in text.splitlines():
        key, _, value = line.partition(b":")
        key = key.strip()
        if key == b"processor":
            processor = int(value)
        elif key == b"cpu MHz" and (cpus is None or processor in cpus):
            found.append(float(value))
    return sum(found) / len(found) if found else None


def cpuinfo_mhz_is_measured(text: bytes) -> bool:
    """Whether /proc/cpuinfo's "cpu MHz" is a reading: on x86 the kernel samples each CPU's
    APERF/MPERF counters where the CPU has them (flag `aperfmperf`); without them (most VMs)
    it prints the fixed TSC frequency, which says nothing about the loop."""
    for line in text.splitlines():
        if line.startswith(b"flags"):
            return b"aperfmperf" in line.partition(b":")[2].split()
    return False


_CPUFREQ = "/sys/devices/system/cpu/cpu{}/cpufreq/scaling_cur_freq"  # kHz
_freq_source: str | None = None  # "sysfs", "cpuinfo" or "none", found on first use


def cpu_mhz(cpus: frozenset[int] | None = None) -> float | None:
    """The current frequency of `cpus` (default: all online CPUs), their mean in MHz: from
    cpufreq's scaling_cur_freq where the kernel has a cpufreq driver, else /proc/cpuinfo's
    "cpu MHz" where it is measured (cpuinfo_mhz_is_measured); None where neither says, as on
    VMs, whose fixed nominal frequency is not a reading. Context only: the mean over all CPUs
    of an unpinned process includes idle ones."""
    global _freq_source
    if _freq_source is None:
        _freq_source = "none"
        if os.path.exists(_CPUFREQ.format(0)):
            _freq_source = "sysfs"
        else:
            try:
                with open("/proc/cpuinfo", "rb") as f:
                    text = f.read()
                if cpuinfo_mhz_is_measured(text) and mhz_from_cpuinfo(text) is not None:
                    _freq_source = "cpuinfo"
            except OSError:
                pass
    if _freq_source == "sysfs":
        khz = []
        for cpu in sorted(cpus) if cpus is not None else range(os.cpu_count() or 1):
            try:
                with open(_CPUFREQ.format(cpu), "rb") as f:
                    khz.append(int(f.read()))
            except (OSError, ValueError):
                continue  # offline, or no driver for that CPU
        return sum(khz) / len(khz) / 1000 if khz else None
    if _freq_source == "cpuinfo":
        try:
            with open("/proc/cpuinfo", "rb") as f:
                return mhz_from_cpuinfo(f.read(), cpus)
        except OSError:
            return None
    return None


@dataclass(frozen=True)
class Edge:
    """The counters at one instant of the timed loop."""

    t_ns: int  # time.monotonic_ns(): CLOCK_MONOTONIC, the sampler's clock
    cpu_s: float  # this process's CPU time, all threads, with its descendants'
    system_busy_s: float | None  # over the CPUs it may run on (all, when unpinned)
    steal_s: float | None = None  # the hypervisor's steal over the same CPUs
    involuntary_switches: int | None = None  # this process's, all its threads
    cpu_mhz: float | None = None  # those CPUs' mean current frequency, where readable
    page_faults: int | None = None  # this process's minor faults (pages touched afresh)
    process_cpu_s: float | None = None  # this process's alone: never goes backwards

    @classmethod
    def now(cls, cpus: frozenset[int] | None = None) -> Edge:
        """`cpus`: the CPUs whose busy time counts (default: those this thread is pinned
        to, or all when it is not)."""
        counted = cpus or pinned_cpus()
        t_ns, cpu_s, switches = time.monotonic_ns(), family_cpu_s(), involuntary_switches()
        times = system_times(counted)
        busy, steal = (None, None) if times is None else times
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        own = time.process_time()
        return cls(t_ns, cpu_s, busy, steal, switches, cpu_mhz(counted), faults, own)


@dataclass(frozen=True)
class Window:
    """The timed loop on CLOCK_MONOTONIC, with the measured process's CPU time and the
    system's busy time spent inside it."""

    start_ns: int
    end_ns: int
    cpu_s: float
    system_busy_s: float | None
    steal_s: float | None = None  # inside system_busy_s
    involuntary_switches: int | None = None
    cpu_mhz_start: float | None = None
    cpu_mhz_end: float | None = None
    page_faults: int | None = None  # the measured process's minor faults inside it

    @classmethod
    def between(cls, start: Edge, end: Edge) -> Window:
        # A descendant counted at the start that exits unreaped by us (its parent reaps
        # it, or none does yet) takes its whole CPU time out of the end's sum: the family's
        # delta can then go below zero and read as others' work. The process's own CPU
        # time cannot go backwards, so the family spent at least that.
        family = end.cpu_s - start.cpu_s
        own = _delta(start.process_cpu_s, end.process_cpu_s)
        return cls(
            start.t_ns,
            end.t_ns,
            family if own is None else max(family, own),
            _delta(start.system_busy_s, end.system_busy_s),
            _delta(start.steal_s, end.steal_s),
            _delta(start.involuntary_switches, end.involuntary_switches),
            start.cpu_mhz,
            end.cpu_mhz,
            _delta(start.page_faults, end.page_faults),
        )


def _delta(start: _N | None, end: _N | None) -> _N | None:
    return None if start is None or end is None else end - start
