"""The sampler's client: run the sampler process around a block of work, read its samples
back and summarize them over a window (e.g. the timed loop).

The process itself is stackcost.measure.sampler_process; the summary's schema is
stackcost.measure.telemetry.

Late samples: the sampler runs under SCHED_IDLE by default, so while every core is busy its
samples come late (gaps up to ~250 ms; Telemetry.gap_max_s shows how late). A mean
interpolated across such a gap blurs whatever changed inside it, so the timed loop's CPU
means come from counters the measured process reads at the loop's edges
(stackcost.measure.counters, passed to summarize as `counters`); the samples give levels
(RSS, GPU, load) and the peak rate.

Resolution: Linux accounts CPU time in clock ticks (USER_HZ = 100, i.e. 10 ms), so a
single 10 ms interval reads 0, 1 or 2 cores of a 1-core load. Means over a window are
exact to a tick; the peak is taken over spans of at least MAX_SPAN_S (see summarize).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from select import select
from typing import Any

import psutil

from stackcost.measure.counters import Window
from stackcost.measure.sampler_process import DEFAULT_INTERVAL_S, RAPL_ROOT
from stackcost.measure.telemetry import BUSY_OTHER_CORES, RaplStatus, Telemetry

# Per-interval CPU rates are quantized to 10 ms ticks; the peak uses spans this long or
# longer, where one tick is <= 10% of a core.
MAX_SPAN_S = 0.1
READY_TIMEOUT_S = 10.0


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

    cpu, system, means_from = _cpu_means(rate("cpu"), rate("sys"), counters, end_ns - start_ns)
    own = rate("self")
    ncpu = int(header.get("logical_cpus") or psutil.cpu_count() or 1)
    basis = threads if threads else ncpu
    other = max(system - cpu - own, 0.0)
    gpus = _gpu_summary(inside, header)
    return Telemetry(
        interval_s=_interval_s(samples, header),
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
        cpu_util_percent_basis=(f"threads={threads}" if threads else f"all {ncpu} logical CPUs"),
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


def _cpu_means(
    cpu: float, system: float, counters: Window | None, window_ns: int
) -> tuple[float, float, str]:
    """The target's and the system's mean busy cores over the window, and where they came
    from: the measured process's own counters where it read them (exact however late the
    samples came), else the samples' interpolated `cpu` and `system`."""
    if counters is None or window_ns <= 0:
        return cpu, system, "samples, interpolated to the window's edges"
    seconds = window_ns / 1e9
    if counters.system_busy_s is not None:
        system = counters.system_busy_s / seconds
    return counters.cpu_s / seconds, system, "the measured process's counters at the window's edges"


def _interval_s(samples: Sequence[Mapping[str, Any]], header: Mapping[str, Any]) -> float:
    """The sampling interval the header asked for, else the samples' mean spacing."""
    interval = float(header.get("interval_s") or 0.0)
    if not interval and len(samples) > 1:
        interval = (samples[-1]["t"] - samples[0]["t"]) / 1e9 / (len(samples) - 1)
    return interval


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
            "stackcost.measure.sampler_process",
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
        # Its own process group: the measured process counts its group's descendants as its
        # own work (counters.family_cpu_s), and the sampler is an instrument, not the cell.
        # It exits by itself when the process it watches is gone.
        self.process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
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
