"""The sampler process: side-channel telemetry of a worker, read from /proc, RAPL and NVML.

Why a process and not a thread: a sampling thread in the worker would take the GIL every
interval and sit in the measured process's CPU time; a separate process costs the worker
nothing but a share of the machine, and that share is measured too (its own CPU time is
recorded and taken out of "other processes' CPU").

    python -m stackcost.measure.sampler_process PID INTERVAL_S OUT_PATH [--rapl-root DIR]
        [--no-nvml] [--sched idle|normal]

Every INTERVAL_S the sampler records, for PID and its descendants: CPU time (user + sys)
and RSS; system-wide: busy CPU time and the 1-minute load average; when NVML works, per
GPU: utilization, memory used, power, the total-energy counter and the target's GPU memory;
when RAPL is readable: each top-level zone's energy counter. One JSON object per line,
flushed line by line, so a crash loses at most the line being written:

    {"kind": "header", ...}     what is available and why not (GPU, RAPL)
    {"t": ..., "cpu": ..., ...} one per sample
    {"kind": "end", ...}        why it stopped: the target exited, or SIGTERM/SIGINT

stackcost.measure.sampler starts this process, reads the file back and summarizes it.

Clock: samples carry time.monotonic_ns(), i.e. CLOCK_MONOTONIC, one system-wide clock on
Linux, so they line up with timestamps taken in the worker with time.monotonic_ns() (or
time.perf_counter_ns(), which CPython also implements with CLOCK_MONOTONIC on Linux).

Import cost: this module imports psutil, pynvml and the standard library only (no torch,
numpy or pydantic): ~60 ms from spawn to the first sample on a quiet machine. Keep it so:
the summary and its pydantic model live in stackcost.measure.sampler and .telemetry.

Priority: the sampler runs under SCHED_IDLE by default, so it never takes a core from the
workload. Each sample costs ~0.1-0.3 ms of CPU in this VM (a Python wake-up alone is 30-90
us); at normal priority, when the workload's threads fill every core, each wake-up preempts
one of them and a parallel op waits for the straggler, which cost +2-6% latency at 10 ms on
2 threads / 2 cores. Under SCHED_IDLE the samples stay on time while any core is idle (1
thread on 2 cores: 100 samples/s, gaps <= 11 ms) and come late while every core is busy
(2 threads on 2 cores: ~15-35 samples/s, gaps up to ~250 ms); Telemetry.gap_max_s shows
how late. --sched normal restores on-time sampling at that cost
(benchmarks/sampler_overhead.py measures both).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import psutil

from stackcost.measure.counters import busy_from_stat_line, descendant_pids, stat_fields

DEFAULT_INTERVAL_S = 0.010
RAPL_ROOT = Path("/sys/class/powercap")
# Descendants are found through /proc/<pid>/task/<tid>/children (~25 us for a worker and
# its threads; psutil's children(recursive=True) walks all of /proc: ~0.6 ms warm, more
# with cold caches), so the list is refreshed this often and the known descendants are
# read in between. A descendant's CPU time is summed from its start, so one found late
# shows up as a catch-up step: it is counted, up to this long late. One that lives and
# dies between refreshes is counted when its parent reaps it.
CHILDREN_REFRESH_S = 0.5


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
    return stat_fields(os.pread(fd, 4096, 0))


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
        found = descendant_pids(self.pid)
        if found is not None:
            return found
        try:
            return {c.pid for c in self.root.children(recursive=True)}
        except psutil.Error:
            return set()

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
    sched = _scheduled_idle() if sched_idle else "normal"
    rapl = RaplProbe(rapl_root)
    out.write(json.dumps(_header(pid, interval_s, gpu, rapl, sched)) + "\n")
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
            line = _sample_fields(proc, system, tree, gpu, rapl)
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


def _scheduled_idle() -> str:
    """Put this process under SCHED_IDLE; the policy it runs under, and why not idle."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError) as exc:
        return f"normal (SCHED_IDLE refused: {_one_line(exc)})"
    return "idle"


def _header(
    pid: int, interval_s: float, gpu: GpuProbe | None, rapl: RaplProbe, sched: str
) -> dict[str, Any]:
    """The samples file's first record: what is sampled, how, and what could not be."""
    return {
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


def _sample_fields(
    proc: tuple[float, int, int],
    system: SystemCpu,
    tree: ProcessTree,
    gpu: GpuProbe | None,
    rapl: RaplProbe,
) -> str:
    """One sample's fields after its time, as JSON members (each led by a comma)."""
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
    return line


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


if __name__ == "__main__":
    sys.exit(main())
