"""Side-channel telemetry, sampled in a separate process while a worker runs.

Why a process and not a thread: a sampling thread in the worker would take the GIL every
interval and sit in the measured process's CPU time; a separate process costs the worker
nothing but a share of the machine, and that share is measured too (its own CPU time is
recorded and taken out of "other processes' CPU").

    python -m stackcost.measure.sampler PID INTERVAL_S OUT_PATH [--rapl-root DIR] [--no-nvml]
        [--sched idle|normal]

Every INTERVAL_S the sampler records, for PID and its descendants: CPU time (user + sys)
and RSS; system-wide: busy CPU time and the 1-minute load average; when NVML works, per
GPU: utilization, memory used, power, the total-energy counter and the target's GPU memory;
when RAPL is readable: each top-level zone's energy counter. One JSON object per line,
flushed line by line, so a crash loses at most the line being written:

    {"kind": "header", ...}     what is available and why not (GPU, RAPL)
    {"t": ..., "cpu": ..., ...} one per sample
    {"kind": "end", ...}        why it stopped: the target exited, or SIGTERM/SIGINT

Clock: samples carry time.monotonic_ns(), i.e. CLOCK_MONOTONIC, one system-wide clock on
Linux, so they line up with timestamps taken in the worker with time.monotonic_ns() (or
time.perf_counter_ns(), which CPython also implements with CLOCK_MONOTONIC on Linux).

Import cost: the sampler process imports psutil, pynvml and the standard library only (no
torch, numpy or pydantic): ~60 ms from spawn to the first sample on a quiet machine. The
pydantic summary model below is therefore defined only when this file is imported as a
module, never when it runs as the sampler.

Priority: the sampler runs under SCHED_IDLE by default, so it never takes a core from the
workload. Each sample costs ~0.1-0.3 ms of CPU in this VM (a Python wake-up alone is 30-90
us); at normal priority, when the workload's threads fill every core, each wake-up preempts
one of them and a parallel op waits for the straggler, which cost +2-6% latency at 10 ms on
2 threads / 2 cores. Under SCHED_IDLE the samples stay on time while any core is idle (1
thread on 2 cores: 100 samples/s, gaps <= 11 ms) and come late while every core is busy
(2 threads on 2 cores: ~15-35 samples/s, gaps up to ~250 ms); Telemetry.gap_max_s shows
how late. A mean interpolated across such a gap blurs whatever changed inside it, so the
timed loop's CPU means come from counters the measured process reads at the loop's edges
(stackcost.measure.counters, passed to summarize as `counters`); the samples give levels
(RSS, GPU, load) and the peak rate. --sched normal restores on-time sampling at that cost
(benchmarks/sampler_overhead.py measures both).

Resolution: Linux accounts CPU time in clock ticks (USER_HZ = 100, i.e. 10 ms), so a
single 10 ms interval reads 0, 1 or 2 cores of a 1-core load. Means over a window are
exact to a tick; the peak is taken over spans of at least MAX_SPAN_S (see summarize).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

import psutil

from stackcost.measure.counters import busy_from_stat_line

DEFAULT_INTERVAL_S = 0.010
RAPL_ROOT = Path("/sys/class/powercap")
# Descendants are found through /proc/<pid>/task/<tid>/children (~25 us for a worker and
# its threads; psutil's children(recursive=True) walks all of /proc: ~0.6 ms warm, more
# with cold caches), so the list is refreshed this often and the known descendants are
# read in between. A descendant's CPU time is summed from its start, so one found late
# shows up as a catch-up step: it is counted, up to this long late. One that lives and
# dies between refreshes is counted when its parent reaps it.
CHILDREN_REFRESH_S = 0.5
# Per-interval CPU rates are quantized to 10 ms ticks; the peak uses spans this long or
# longer, where one tick is <= 10% of a core.
MAX_SPAN_S = 0.1
# "Other processes' CPU" above this (in cores, averaged over the window) flags the machine
# as busy: a quarter of a core taken from a 2-core box moves medians by several percent.
BUSY_OTHER_CORES = 0.25
READY_TIMEOUT_S = 10.0


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


# --------------------------------------------------------------------------- probes


class RaplProbe:
    """The top-level RAPL zones under root (intel-rapl:N, not the intel-rapl:N:M subzones,
    which the package already contains). A zone is kept only if energy_uj reads."""

    def __init__(self, root: Path = RAPL_ROOT) -> None:
        self.zones: dict[str, tuple[Path, int]] = {}  # name -> (energy_uj path, max range)
        self.reason: str | None = None
        zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
        if not zones:
            self.reason = f"no RAPL zones under {root} (not an Intel/AMD host, or a VM)"
            return
        errors: list[str] = []
        for zone in zones:
            try:
                name = (zone / "name").read_text().strip() or zone.name
                energy = zone / "energy_uj"
                int(energy.read_text())
                max_uj = int((zone / "max_energy_range_uj").read_text())
            except (OSError, ValueError) as exc:
                errors.append(f"{zone.name}: {_one_line(exc)}")
                continue
            self.zones[name] = (energy, max_uj)
        if not self.zones:
            # energy_uj has been root-only since Linux 5.10 (the PLATYPUS side channel).
            self.reason = "RAPL energy_uj not readable (root-only since Linux 5.10): " + "; ".join(
                errors
            )

    def read(self) -> dict[str, list[int]]:
        """{zone name: [energy_uj, max_energy_range_uj]}; a zone that fails is left out,
        so a counter that disappears shows as missing, never as zero."""
        out: dict[str, list[int]] = {}
        for name, (path, max_uj) in self.zones.items():
            with contextlib.suppress(OSError, ValueError):
                out[name] = [int(path.read_text()), max_uj]
        return out


class GpuProbe:
    """NVML per device. Any NVMLError at init means "no GPU telemetry", with its text as
    the reason. A query a device does not support is dropped after its first failure, so
    an unsupported counter costs one call, not one per sample."""

    def __init__(self, nvml: Any = None) -> None:
        self.nvml = nvml
        self.handles: list[Any] = []
        self.devices: list[dict[str, Any]] = []
        self.reason: str | None = None
        self._dead: set[tuple[int, str]] = set()
        if nvml is None:
            try:
                import pynvml as nvml  # only the sampler process pays for it
            except ImportError as exc:
                self.reason = _one_line(exc)
                return
            self.nvml = nvml
        try:
            nvml.nvmlInit()
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                name = nvml.nvmlDeviceGetName(handle)
                self.handles.append(handle)
                self.devices.append(
                    {"index": i, "name": name.decode() if isinstance(name, bytes) else name}
                )
        except nvml.NVMLError as exc:
            self.reason = _one_line(exc)
            self.handles, self.devices = [], []
            return
        if not self.handles:
            self.reason = "NVML found no GPU"

    def _query(self, i: int, what: str, fn: Callable[[], Any]) -> Any:
        if (i, what) in self._dead:
            return None
        try:
            return fn()
        except self.nvml.NVMLError:
            self._dead.add((i, what))
            return None

    def read(self, pids: set[int]) -> list[dict[str, Any]]:
        nv = self.nvml
        out = []
        for i, h in enumerate(self.handles):
            util = self._query(i, "util", lambda h=h: nv.nvmlDeviceGetUtilizationRates(h).gpu)
            mem = self._query(i, "mem", lambda h=h: nv.nvmlDeviceGetMemoryInfo(h).used)
            power = self._query(i, "power", lambda h=h: nv.nvmlDeviceGetPowerUsage(h))
            energy = self._query(i, "energy", lambda h=h: nv.nvmlDeviceGetTotalEnergyConsumption(h))
            procs = self._query(i, "procs", lambda h=h: nv.nvmlDeviceGetComputeRunningProcesses(h))
            proc_mem = None
            if procs is not None:
                proc_mem = sum(p.usedGpuMemory or 0 for p in procs if p.pid in pids)
            out.append(
                {
                    "index": i,
                    "util": util,  # percent of the driver's last sample period
                    "mem": mem,  # bytes used on the device, all processes
                    "power_mw": power,
                    "energy_mj": energy,  # since the driver loaded (Volta and later)
                    "proc_mem": proc_mem,  # bytes held by the target and its descendants
                }
            )
        return out

    def close(self) -> None:
        if self.handles:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(fd: int) -> list[bytes]:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses):
    [0] state, [11] utime, [12] stime, [13] cutime, [14] cstime, [21] rss (pages)."""
    raw = os.pread(fd, 4096, 0)
    return raw[raw.rindex(b")") + 2 :].split()


class ProcessTree:
    """CPU time and RSS of a process and its descendants, the sampler excluded (it is the
    worker's child when the worker watches itself).

    The hot path reads /proc/<pid>/stat itself (what psutil's cpu_times and memory_info
    read) through descriptors kept open and re-read with pread: psutil's Python layers
    cost ~200 us per sample once its code is cold after a 10 ms sleep, this ~20 us. An
    open descriptor also pins the process, not the number: once the target is reaped the
    read fails with ESRCH, so a recycled PID is never mistaken for it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.root = psutil.Process(pid)  # the fallback way to find descendants
        self._fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        self.children: dict[int, int] = {}  # pid -> open stat descriptor
        self._refreshed = -CHILDREN_REFRESH_S
        self._self = os.getpid()

    def pids(self) -> set[int]:
        return {self.pid, *self.children}

    def _descendants(self) -> set[int]:
        """Every descendant, through each thread's children file; psutil's walk of all of
        /proc where the kernel lacks those files (CONFIG_PROC_CHILDREN)."""
        found: set[int] = set()
        todo = [self.pid]
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
                    if not os.path.exists(f"/proc/{parent}/task/{tid}"):
                        continue  # the thread exited
                    try:
                        return {c.pid for c in self.root.children(recursive=True)}
                    except psutil.Error:
                        return set()
                except OSError:
                    continue
                todo += kids - found
                found |= kids
        return found

    def _refresh(self) -> None:
        kids = self._descendants() - {self._self}
        for pid in set(self.children) - kids:
            os.close(self.children.pop(pid))
        for pid in kids - set(self.children):
            with contextlib.suppress(OSError):
                self.children[pid] = os.open(f"/proc/{pid}/stat", os.O_RDONLY)

    def read(self, now: float) -> tuple[float, int, int] | None:
        """(cpu seconds, rss bytes, live descendants); None once the root is gone."""
        try:
            f = _stat_fields(self._fd)
        except OSError:
            return None
        if f[0] == b"Z":  # exited, not yet reaped by its parent
            return None
        # cutime/cstime hold the reaped descendants: a child's time moves there from the
        # live sum below when it is reaped, so the total stays continuous.
        ticks = int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        pages = int(f[21])
        if now - self._refreshed >= CHILDREN_REFRESH_S:
            self._refreshed = now
            self._refresh()
        for pid, fd in list(self.children.items()):
            try:
                c = _stat_fields(fd)
            except OSError:
                os.close(self.children.pop(pid))
                continue
            ticks += int(c[11]) + int(c[12]) + int(c[13]) + int(c[14])
            pages += int(c[21])  # shared pages count once per process: an upper bound
        return ticks * _TICK_S, pages * _PAGE, len(self.children)

    def close(self) -> None:
        for fd in [self._fd, *self.children.values()]:
            os.close(fd)
        self.children = {}


class SystemCpu:
    """Busy CPU seconds over all CPUs since boot, from the first line of /proc/stat (what
    psutil.cpu_percent counts as busy), through a descriptor kept open."""

    def __init__(self) -> None:
        self._fd = os.open("/proc/stat", os.O_RDONLY)

    def busy_s(self) -> float:
        return busy_from_stat_line(os.pread(self._fd, 512, 0).split(b"\n", 1)[0])

    def close(self) -> None:
        os.close(self._fd)


# --------------------------------------------------------------------------- the process


def run(
    pid: int,
    interval_s: float,
    out: IO[str],
    *,
    rapl_root: Path = RAPL_ROOT,
    nvml: bool = True,
    sched_idle: bool = True,
    ready: IO[str] | None = None,
) -> str:
    """Sample until the target exits or SIGTERM/SIGINT arrives; returns why it stopped.

    The signals are blocked and waited for with sigtimedwait, which doubles as the sleep
    between samples: a stop request ends the wait at once, then one last sample is taken
    so the window the parent marked just before stopping us is covered."""
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    tree = ProcessTree(pid)
    gpu = GpuProbe() if nvml else None
    sched = "normal"
    if sched_idle:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            sched = "idle"
        except (AttributeError, OSError) as exc:
            sched = f"normal (SCHED_IDLE refused: {_one_line(exc)})"
    rapl = RaplProbe(rapl_root)
    header = {
        "kind": "header",
        "pid": pid,
        "sampler_pid": os.getpid(),
        "interval_s": interval_s,
        "clock": "CLOCK_MONOTONIC (time.monotonic_ns)",
        "logical_cpus": psutil.cpu_count() or 1,
        "gpus": gpu.devices if gpu else [],
        "gpu_reason": (gpu.reason if gpu else "NVML disabled (--no-nvml)"),
        "rapl_available": bool(rapl.zones),
        "rapl_zones": sorted(rapl.zones),
        "rapl_reason": rapl.reason,
        "sched": sched,
    }
    out.write(json.dumps(header) + "\n")
    out.flush()
    clock = time.monotonic_ns
    system = SystemCpu()
    stopped_by: str | None = None  # the signal's name once a stop is requested
    next_t = clock()
    n = 0
    try:
        while True:
            t0 = clock()
            proc = tree.read(t0 / 1e9)
            if proc is None:
                break
            # Formatted by hand: json.dumps of the flat part costs ~25 us with cold caches.
            line = (
                f',"cpu":{proc[0]:.3f},"rss":{proc[1]},"nch":{proc[2]}'
                f',"sys":{system.busy_s():.3f},"self":{sum(os.times()[:2]):.3f}'
                f',"load1":{os.getloadavg()[0]:.2f}'
            )
            if gpu is not None and gpu.handles:
                line += ',"gpu":' + json.dumps(gpu.read(tree.pids()), separators=(",", ":"))
            if rapl.zones:
                line += ',"rapl":' + json.dumps(rapl.read(), separators=(",", ":"))
            # Midpoint of the reads: each value is off by at most half their duration.
            out.write(f'{{"t":{(t0 + clock()) // 2}{line}}}\n')
            out.flush()
            n += 1
            if n == 1 and ready is not None:
                ready.write("ready\n")
                ready.flush()
            if stopped_by is not None:
                break  # that was the last sample after a stop request
            # A fixed schedule, not sleep(interval): reads don't drift it; an overrun skips.
            next_t += int(interval_s * 1e9)
            now = clock()
            if next_t < now:
                next_t = now
            got = signal.sigtimedwait(stop_signals, (next_t - now) / 1e9)
            if got is not None:
                stopped_by = signal.Signals(got.si_signo).name
    finally:
        tree.close()
        system.close()
        if gpu is not None:
            gpu.close()
    reason = stopped_by or "target exited"
    out.write(json.dumps({"kind": "end", "reason": reason, "t": clock(), "samples": n}) + "\n")
    out.flush()
    return reason


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Sample a process's telemetry to JSON lines.")
    ap.add_argument("pid", type=int)
    ap.add_argument(
        "interval_s", type=float, help=f"seconds between samples (e.g. {DEFAULT_INTERVAL_S})"
    )
    ap.add_argument("out_path", type=Path)
    ap.add_argument("--rapl-root", type=Path, default=RAPL_ROOT, help="powercap directory")
    ap.add_argument("--no-nvml", action="store_true", help="skip GPU telemetry")
    ap.add_argument(
        "--sched",
        choices=("idle", "normal"),
        default="idle",
        help="idle (default): SCHED_IDLE, never preempt the workload; normal: on-time samples",
    )
    args = ap.parse_args(argv)
    try:
        psutil.Process(args.pid)
    except psutil.NoSuchProcess:
        print(f"no process {args.pid}", file=sys.stderr)
        return 2
    # Line buffering: every sample reaches the file when its newline is written.
    with open(args.out_path, "w", buffering=1) as out:
        run(
            args.pid,
            args.interval_s,
            out,
            rapl_root=args.rapl_root,
            nvml=not args.no_nvml,
            sched_idle=args.sched == "idle",
            ready=sys.stdout,
        )
    return 0


# --------------------------------------------------------------------------- reading


def read_samples(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """(header, samples, end record or None). A torn last line (the sampler was killed
    mid-write) is skipped."""
    header: dict[str, Any] = {}
    end: dict[str, Any] | None = None
    samples: list[dict[str, Any]] = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = rec.get("kind")
            if kind == "header":
                header = rec
            elif kind == "end":
                end = rec
            else:
                samples.append(rec)
    return header, samples, end


def bracket(samples: Sequence[Mapping[str, Any]], start_ns: int, end_ns: int) -> tuple[int, int]:
    """Indices (lo, hi) of the smallest run of samples covering [start, end]: the last
    sample at or before start and the first at or after end, clipped to what exists."""
    ts = [s["t"] for s in samples]
    lo = max(bisect_right(ts, start_ns) - 1, 0)
    hi = min(bisect_left(ts, end_ns), len(ts) - 1)
    return lo, max(hi, lo)


def interpolate(ts: Sequence[int], values: Sequence[float], t: int) -> float:
    """A cumulative counter at time t, linear between the samples around it."""
    i = bisect_left(ts, t)
    if i <= 0:
        return float(values[0])
    if i >= len(ts):
        return float(values[-1])
    t0, t1 = ts[i - 1], ts[i]
    if t1 == t0:
        return float(values[i])
    return values[i - 1] + (values[i] - values[i - 1]) * (t - t0) / (t1 - t0)


def _peak_rate(ts: Sequence[int], values: Sequence[float], span_ns: int) -> float:
    """The highest rate over any run of samples at least span_ns long (or over everything
    when the whole run is shorter)."""
    if len(ts) < 2:
        return 0.0
    if ts[-1] - ts[0] <= span_ns:
        return max(0.0, (values[-1] - values[0]) * 1e9 / max(ts[-1] - ts[0], 1))
    best, j = 0.0, 0
    for i in range(len(ts)):
        j = max(j, i + 1)
        while j < len(ts) and ts[j] - ts[i] < span_ns:
            j += 1
        if j >= len(ts):
            break
        best = max(best, (values[j] - values[i]) * 1e9 / (ts[j] - ts[i]))
    return best


def _gpu_summary(window: Sequence[Mapping[str, Any]], header: Mapping[str, Any]) -> list[dict]:
    names = {d["index"]: d.get("name") for d in header.get("gpus", [])}
    by_dev: dict[int, list[Mapping[str, Any]]] = {}
    for s in window:
        for d in s.get("gpu") or []:
            by_dev.setdefault(d["index"], []).append(d)

    def stat(rows: list[Mapping[str, Any]], key: str, fn: Callable[[list], float]) -> Any:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return fn(vals) if vals else None

    def mean(v: list) -> float:
        return sum(v) / len(v)

    out = []
    for i, rows in sorted(by_dev.items()):
        power = stat(rows, "power_mw", mean)
        out.append(
            {
                "index": i,
                "name": names.get(i),
                "samples": len(rows),
                "util_percent_mean": stat(rows, "util", mean),
                "util_percent_max": stat(rows, "util", max),
                "memory_used_bytes_max": stat(rows, "mem", max),
                "power_watts_mean": None if power is None else power / 1e3,
                "process_memory_bytes_max": stat(rows, "proc_mem", max),
            }
        )
    return out


# The sampler process never summarizes: keep pydantic (~60 ms of imports) out of it.
if __name__ != "__main__":
    import subprocess
    import tempfile
    from select import select

    from pydantic import BaseModel, Field

    from stackcost.measure.counters import Window

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
        cpu_util_cores_max: float  # over spans >= MAX_SPAN_S (ticks are 10 ms)
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

    def summarize(
        samples: Sequence[Mapping[str, Any]],
        start_ns: int,
        end_ns: int,
        *,
        header: Mapping[str, Any] | None = None,
        threads: int | None = None,
        counters: Window | None = None,
    ) -> Telemetry:
        """Telemetry over [start_ns, end_ns]. Cumulative counters (CPU seconds) are
        interpolated to the window's edges from the samples around them, so a window
        shorter than the interval still gets a mean; levels (RSS, load, GPU) come from the
        samples inside the window, or the two around it when none falls inside.

        `counters`, read by the measured process itself at the window's edges, replace the
        interpolated target and system CPU means: exact however late the samples came."""
        header = header or {}
        if not samples:
            raise ValueError("no telemetry samples")
        if end_ns < start_ns:
            raise ValueError(f"window ends before it starts ({start_ns} > {end_ns})")
        lo, hi = bracket(samples, start_ns, end_ns)
        run_ = samples[lo : hi + 1]
        ts = [s["t"] for s in run_]
        c0, c1 = max(start_ns, ts[0]), min(end_ns, ts[-1])
        covered_ns = max(c1 - c0, 0)
        inside = [s for s in run_ if start_ns <= s["t"] <= end_ns] or list(run_)

        def rate(key: str) -> float:
            if covered_ns == 0:
                return 0.0
            vals = [s[key] for s in run_]
            delta = interpolate(ts, vals, c1) - interpolate(ts, vals, c0)
            return max(delta, 0.0) * 1e9 / covered_ns

        cpu, system = rate("cpu"), rate("sys")
        means_from = "samples, interpolated to the window's edges"
        if counters is not None and end_ns > start_ns:
            seconds = (end_ns - start_ns) / 1e9
            cpu = counters.cpu_s / seconds
            if counters.system_busy_s is not None:
                system = counters.system_busy_s / seconds
            means_from = "the measured process's counters at the window's edges"
        own = rate("self")
        ncpu = int(header.get("logical_cpus") or psutil.cpu_count() or 1)
        basis = threads if threads else ncpu
        other = max(system - cpu - own, 0.0)
        gpus = _gpu_summary(inside, header)
        interval = float(header.get("interval_s") or 0.0)
        if not interval and len(samples) > 1:
            interval = (samples[-1]["t"] - samples[0]["t"]) / 1e9 / (len(samples) - 1)
        return Telemetry(
            interval_s=interval,
            n_samples=sum(1 for s in run_ if start_ns <= s["t"] <= end_ns),
            gap_max_s=max((b - a for a, b in pairwise(ts)), default=0) / 1e9,
            sched=header.get("sched"),
            means_from=means_from,
            window_s=(end_ns - start_ns) / 1e9,
            covered_s=covered_ns / 1e9,
            logical_cpus=ncpu,
            threads=threads,
            cpu_util_cores_mean=cpu,
            cpu_util_cores_max=max(
                _peak_rate(ts, [s["cpu"] for s in run_], int(MAX_SPAN_S * 1e9)), cpu
            ),
            cpu_util_percent_of_threads=100.0 * cpu / basis,
            cpu_util_percent_basis=(
                f"threads={threads}" if threads else f"all {ncpu} logical CPUs"
            ),
            rss_peak_bytes=max(s["rss"] for s in inside),
            system_busy_cores_mean=system,
            sampler_cores_mean=own,
            other_busy_cores_mean=other,
            loadavg_1m=sum(s["load1"] for s in inside) / len(inside),
            busy_machine=other > BUSY_OTHER_CORES,
            gpu=gpus or None,
            gpu_reason=header.get("gpu_reason"),
            rapl=RaplStatus(
                available=bool(header.get("rapl_available")),
                reason=header.get("rapl_reason"),
                zones=list(header.get("rapl_zones") or []),
            ),
        )

    class SamplerError(RuntimeError):
        pass

    class Sampler:
        """Run the sampler process around a block of work.

            with Sampler(out_path=path) as s:      # returns once the first sample is on disk
                s.mark("timed_start"); loop(); s.mark("timed_end")
            tel = s.summary()                      # the timed_start..timed_end window

        out_path=None writes to a temporary file that is removed on exit (the samples are
        kept in memory). startup_s is how long the process took to its first sample."""

        def __init__(
            self,
            pid: int | None = None,
            interval_s: float = DEFAULT_INTERVAL_S,
            out_path: Path | str | None = None,
            *,
            rapl_root: Path = RAPL_ROOT,
            nvml: bool = True,
            sched_idle: bool = True,
            threads: int | None = None,
            ready_timeout_s: float = READY_TIMEOUT_S,
        ) -> None:
            self.pid = os.getpid() if pid is None else pid
            self.interval_s = interval_s
            self._own_file = out_path is None
            self.out_path = Path(out_path) if out_path is not None else None
            self.rapl_root = rapl_root
            self.nvml = nvml
            self.sched_idle = sched_idle
            self.threads = threads
            self.ready_timeout_s = ready_timeout_s
            self.marks: dict[str, int] = {}
            self.header: dict[str, Any] = {}
            self.samples: list[dict[str, Any]] = []
            self.end: dict[str, Any] | None = None
            self.startup_s: float | None = None
            self.process: subprocess.Popen[str] | None = None

        def start(self) -> Sampler:
            if self.out_path is None:
                fd, name = tempfile.mkstemp(prefix="stackcost-telemetry-", suffix=".jsonl")
                os.close(fd)
                self.out_path = Path(name)
            cmd = [
                sys.executable,
                "-m",
                "stackcost.measure.sampler",
                str(self.pid),
                repr(self.interval_s),
                str(self.out_path),
                "--rapl-root",
                str(self.rapl_root),
            ]
            if not self.nvml:
                cmd.append("--no-nvml")
            if not self.sched_idle:
                cmd += ["--sched", "normal"]
            # Open from start() to stop(): a file, not a pipe nobody drains.
            self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115
            t0 = time.perf_counter()
            self.process = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=self._stderr, text=True
            )
            assert self.process.stdout is not None
            ready, _, _ = select([self.process.stdout], [], [], self.ready_timeout_s)
            line = self.process.stdout.readline() if ready else ""
            if line.strip() != "ready":
                self._kill()
                why = self._stderr_text()
                self.stop()  # closes the pipe and the stderr file, removes our temp file
                raise SamplerError(f"telemetry sampler did not start: {why}")
            self.startup_s = time.perf_counter() - t0
            return self

        def mark(self, name: str) -> int:
            """Record a CLOCK_MONOTONIC timestamp (same clock as the samples)."""
            self.marks[name] = t = time.monotonic_ns()
            return t

        def stop(self, timeout_s: float = 5.0) -> None:
            """SIGTERM (the sampler takes one last sample and exits), then read the file."""
            if self.process is not None:
                if self.process.poll() is None:
                    self.process.terminate()
                try:
                    self.process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self._kill()
                if self.process.stdout is not None:
                    self.process.stdout.close()
                self._stderr.close()
            if self.out_path is not None and self.out_path.exists():
                self.header, self.samples, self.end = read_samples(self.out_path)
                if self._own_file:
                    self.out_path.unlink()

        def _kill(self) -> None:
            assert self.process is not None
            self.process.kill()
            self.process.wait()

        def _stderr_text(self) -> str:
            self._stderr.seek(0)
            text = self._stderr.read().strip()
            code = self.process.poll() if self.process else None
            return text.splitlines()[-1] if text else f"exit code {code}"

        def __enter__(self) -> Sampler:
            return self.start()

        def __exit__(self, *exc: object) -> None:
            self.stop()

        def summary(
            self,
            start_ns: int | None = None,
            end_ns: int | None = None,
            *,
            threads: int | None = None,
            counters: Window | None = None,
        ) -> Telemetry:
            """Telemetry over [start_ns, end_ns]; by default the timed_start..timed_end
            marks, else everything sampled."""
            if not self.samples:
                raise SamplerError("no samples: call summary() after the with-block")
            if start_ns is None:
                start_ns = self.marks.get("timed_start", self.samples[0]["t"])
            if end_ns is None:
                end_ns = self.marks.get("timed_end", self.samples[-1]["t"])
            return summarize(
                self.samples,
                start_ns,
                end_ns,
                header=self.header,
                threads=threads if threads is not None else self.threads,
                counters=counters,
            )


if __name__ == "__main__":
    sys.exit(main())
