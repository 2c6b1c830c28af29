"""The machine's measured peaks: GEMM GFLOP/s and STREAM-like bandwidth, per thread count.

The roofline needs a ceiling for each resource. Datasheet peaks (cores x clock x FMA
width) are not what torch can reach on this box under its turbo, thermal and memory
configuration, so the ceilings are measured here, with torch itself: the best of a few
square fp32 matmuls (what a convolution lowers to) and a triad over arrays too large for
the caches. "Peak" means the best run, not the typical one: a ceiling, not a forecast.

Measuring takes seconds, so each (environment, thread count) is measured once and cached
as JSON; the caller's fingerprint (stackcost.env.fingerprint) keys the file, so a torch
upgrade or a different machine measures afresh. Other processes' CPU during the
measurement is recorded; a measurement taken on a busy machine is used but not cached, so
a low ceiling does not outlive the load that caused it (`stackcost peaks --remeasure`
replaces a cached one by hand).

A GPU's ceilings (matmul per precision, copy bandwidth) are measured by gpu_peaks.py and
cached here too, keyed by the fingerprint and the GPU; a run stores them in its
environment beside the CPU's, under "cuda" (the CPU's are under their thread count), and
`cell_peaks` picks a cell's by its device. `Peaks.peak` and `GpuPeaks.peak` say which peak
a cell's precision is held to.

torch is imported inside the functions: the CLI imports this module without paying for it.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from stackcost.env import ONEDNN_CAP_NAMES, cpu_info, now, onednn_bf16_capped, onednn_cap
from stackcost.measure.gpu_peaks import GpuPeaks
from stackcost.measure.sampler_process import SystemCpu
from stackcost.measure.telemetry import BUSY_OTHER_CORES

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
GEMM_N, GEMM_N_QUICK = 2048, 512
STREAM_N, STREAM_N_QUICK = 64 << 20, 4 << 20  # float32 elements per array
WARMUP, GEMM_RUNS, STREAM_RUNS = 2, 5, 10
# Read bandwidth by working set. A decode step reads the same weights every step, so a step
# whose bytes fit in the last-level cache reads them at the cache's bandwidth, not memory's
# (a 2-vCPU Xeon that reports 480 MiB of L3: 50 GB/s up to 64 MiB, 33 at 160 MiB, 24 from
# 256 MiB on). A step is held to the read bandwidth of an array of its size, re-read (a
# cache-aware roofline). These sizes below the large array, which is the last point.
READ_CURVE_BYTES = tuple(mib << 20 for mib in (4, 16, 32, 64, 96, 128, 160, 192))
READ_CALL_BYTES = 64 << 20  # a timed run of a small array sums it until this many bytes
# A CPU cell's precision -> the GEMM peak it is held to (amp: CPU autocast's bfloat16, as
# backends/torch_common.AUTOCAST_DTYPE says). The GPU's mapping is gpu_peaks'.
CPU_PEAK_OF_PRECISION = {"fp32": "fp32", "bf16": "bf16", "amp": "bf16"}


class Peaks(BaseModel):
    """Best-case throughput of this machine at `threads` intra-op threads."""

    threads: int
    fp32_gflops: float
    bf16_gflops: float | None  # None: no native bf16 GEMM, so no peak to compare against
    bf16_note: str
    stream_gbs: float  # 1e9 bytes/s
    # Read-only bandwidth (a sum over one large array): decode reads its weights and KV
    # cache and writes little, so its roofline is this, not triad's (which also writes).
    # None: measured before it was kept.
    read_gbs: float | None = None
    read_method: str = ""
    # (array bytes, GB/s) of the same sum over smaller arrays, read_gbs's array last.
    # None: measured before it was kept.
    read_by_size: list[tuple[int, float]] | None = None
    gemm_method: str
    stream_method: str
    measured_at: str  # ISO 8601, UTC
    seconds: float  # how long measuring took
    quick: bool = False  # small sizes: fast, but the stream arrays may sit in L3
    # Other processes' CPU while measuring, in cores (None: measured before this was kept).
    other_busy_cores: float | None = None

    @property
    def busy(self) -> bool:
        """Measured while other processes took enough CPU to lower the ceilings."""
        return (self.other_busy_cores or 0.0) > BUSY_OTHER_CORES

    def peak(self, precision: str) -> tuple[str, float] | None:
        """(what the peak is, GFLOP/s) for a cell at `precision`; None where there is none.

        fp16 and tf32 are not measured on a CPU, and bf16 only where it has bf16
        instructions; amp autocasts to bfloat16 on a CPU, so it is held to bf16's."""
        which = CPU_PEAK_OF_PRECISION.get(precision)
        value = {"fp32": self.fp32_gflops, "bf16": self.bf16_gflops}.get(which or "")
        if not value:
            return None
        plural = "thread" if self.threads == 1 else "threads"
        return f"{which} GEMM, {self.threads} {plural}", value

    def read_ceiling_gbs(self, nbytes: float) -> float | None:
        """The read bandwidth of a working set of `nbytes` read again and again: the
        measured curve, interpolated in log size, never below the large array's (memory's)
        and that at or beyond the largest array. Peaks kept before the curve: read_gbs at
        any size. None without a read peak."""
        if not self.read_gbs:
            return None
        if not self.read_by_size:
            return self.read_gbs
        import numpy as np

        sizes, gbs = zip(*sorted(self.read_by_size), strict=True)
        logs = [math.log(b) for b in sizes]
        value = float(np.interp(math.log(max(nbytes, 1.0)), logs, gbs))
        return max(value, self.read_gbs)


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "stackcost" / "peaks"


def _best_seconds(fn: Callable[[], object], runs: int, calls: int = 1) -> float:
    """Shortest of `runs` timed runs of `calls` calls each, after WARMUP untimed calls; the
    seconds of one call.

    The minimum, because interference (other jobs, interrupts) only ever adds time:
    the fastest run is the closest to what the hardware can do.
    """
    for _ in range(WARMUP):
        fn()
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / calls


def _gemm_gflops(n: int, dtype: object) -> float:
    import torch

    g = torch.Generator().manual_seed(0)  # a private RNG: the caller's global state is theirs
    a = torch.randn(n, n, generator=g).to(dtype)  # type: ignore[arg-type]
    b = torch.randn(n, n, generator=g).to(dtype)  # type: ignore[arg-type]
    out = torch.empty(n, n, dtype=dtype)  # type: ignore[arg-type]
    t = _best_seconds(lambda: torch.mm(a, b, out=out), GEMM_RUNS)
    return 2 * n**3 / t / 1e9


def _stream_gbs(n: int) -> float:
    import torch

    # Filled, not empty: every page is touched before timing, so page faults don't count.
    a, b, c = torch.zeros(n), torch.full((n,), 1.0), torch.full((n,), 2.0)
    t = _best_seconds(lambda: torch.add(b, c, alpha=3.0, out=a), STREAM_RUNS)
    return 3 * a.numel() * a.element_size() / t / 1e9


def _read_gbs(n: int) -> list[tuple[int, float]]:
    """(bytes, GB/s) of torch.sum over the first elements of one filled array of `n`
    float32: READ_CURVE_BYTES below its size, then the whole array (memory's, when `n` is
    too large for the caches)."""
    import torch

    a = torch.full((n,), 1.0)  # filled: every page touched before timing
    whole = a.numel() * a.element_size()
    out = []
    for nbytes in [*(b for b in READ_CURVE_BYTES if b < whole), whole]:
        part = a[: nbytes // a.element_size()]
        calls = max(1, READ_CALL_BYTES // nbytes)  # a small array's run is long enough to time
        t = _best_seconds(lambda part=part: torch.sum(part), STREAM_RUNS, calls)
        out.append((nbytes, nbytes / t / 1e9))
    return out


def _bf16_support() -> tuple[bool, str]:
    flags = [f for f in BF16_FLAGS if f in cpu_info()["flags"]]
    cap = onednn_cap()
    if flags and onednn_bf16_capped(cap):
        # torch's bf16 GEMM is oneDNN's: capped, it falls back to a reference loop (a
        # 2048^3 bf16 GEMM took minutes under ONEDNN_MAX_CPU_ISA=AVX2), which is no peak.
        return False, (
            f"CPU has {', '.join(flags)} but oneDNN is capped at {cap} ({ONEDNN_CAP_NAMES}), "
            "which has no bf16 kernels: not a peak"
        )
    if flags:
        return True, f"CPU has {', '.join(flags)}: bf16 GEMM runs on native instructions"
    return False, (
        f"CPU lacks {'/'.join(BF16_FLAGS)}: bf16 GEMM would be emulated (converted to fp32), "
        "not a peak"
    )


def measure_peaks(threads: int, quick: bool = False) -> Peaks:
    """Measure the GEMM and bandwidth ceilings with torch at `threads` intra-op threads.

    ~3 s on 2 cores (quick: well under 1 s). The caller's thread setting is restored.
    """
    import torch

    start = time.perf_counter()
    system = SystemCpu()
    busy0, own0 = system.busy_s(), sum(os.times()[:2])
    n = GEMM_N_QUICK if quick else GEMM_N
    elements = STREAM_N_QUICK if quick else STREAM_N
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fp32 = _gemm_gflops(n, torch.float32)
        bf16_ok, bf16_note = _bf16_support()
        bf16 = _gemm_gflops(n, torch.bfloat16) if bf16_ok else None
        stream = _stream_gbs(elements)
        curve = _read_gbs(elements)
    finally:
        torch.set_num_threads(previous)
    seconds = time.perf_counter() - start
    others = max((system.busy_s() - busy0) - (sum(os.times()[:2]) - own0), 0.0) / seconds
    system.close()
    mib = elements * 4 / 2**20
    return Peaks(
        threads=threads,
        fp32_gflops=fp32,
        bf16_gflops=bf16,
        bf16_note=bf16_note,
        stream_gbs=stream,
        gemm_method=(
            f"torch.mm of two {n}x{n} matrices (out= preallocated), 2*n^3 FLOPs per call; "
            f"best of {GEMM_RUNS} timed calls after {WARMUP} warmup, time.perf_counter"
        ),
        stream_method=(
            f"STREAM triad a = b + 3*c via torch.add(b, c, alpha=3, out=a) on float32 arrays "
            f"of {elements:,} elements ({mib:,.0f} MiB each); 3 x array bytes per call "
            f"(2 reads + 1 write, write-allocate traffic not counted); best of {STREAM_RUNS} "
            f"timed calls after {WARMUP} warmup"
            + (
                "; quick: arrays this small can fit in a large L3, so this may be cache bandwidth"
                if quick
                else ""
            )
        ),
        read_gbs=curve[-1][1],
        read_by_size=curve,
        read_method=(
            f"read-only: torch.sum of one float32 array of {elements:,} elements "
            f"({mib:,.0f} MiB); array bytes per call; best of {STREAM_RUNS} timed calls after "
            f"{WARMUP} warmup; by working set: the same over its first "
            f"{', '.join(f'{b >> 20}' for b, _ in curve[:-1]) or 'no'} MiB, each run summing "
            f"at least {READ_CALL_BYTES >> 20} MiB"
        ),
        measured_at=now(),
        seconds=seconds,
        quick=quick,
        other_busy_cores=others,
    )


def cache_path(fingerprint: str, threads: int, cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / f"{fingerprint}-t{threads}.json"


def cached_peaks(
    fingerprint: str, threads: int, cache_dir: Path | None = None, quick: bool = False
) -> Peaks | None:
    """The cached peaks, if there are any that satisfy the request.

    An unreadable or invalid cache file counts as absent: it is only a cache. A cached
    quick measurement does not satisfy a full request (its sizes are too small to be a
    ceiling); a full one satisfies both.
    """
    try:
        cached = Peaks.model_validate_json(cache_path(fingerprint, threads, cache_dir).read_text())
    except (OSError, ValidationError):
        return None
    if cached.read_gbs is None or cached.read_by_size is None:  # kept before: measure again
        return None
    return cached if cached.threads == threads and (quick or not cached.quick) else None


def store_peaks(fingerprint: str, peaks: Peaks, cache_dir: Path | None = None) -> bool:
    """Cache `peaks` unless they were measured on a busy machine; True when written."""
    if peaks.busy:
        return False
    return _write_atomic(cache_path(fingerprint, peaks.threads, cache_dir), peaks)


def _write_atomic(path: Path, peaks: BaseModel) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: a concurrent reader sees the old file or the new one, not half.
        tmp = path.with_suffix(f".tmp{time.monotonic_ns()}")
        tmp.write_text(peaks.model_dump_json(indent=2))
        tmp.replace(path)
    except OSError:
        return False  # a read-only cache only costs the next caller a re-measure
    return True


def load_or_measure(
    fingerprint: str, threads: int, cache_dir: Path | None = None, quick: bool = False
) -> Peaks:
    """This environment's peaks at `threads`, from the cache or measured once and stored."""
    cached = cached_peaks(fingerprint, threads, cache_dir, quick)
    if cached is not None:
        return cached
    peaks = measure_peaks(threads, quick=quick)
    store_peaks(fingerprint, peaks, cache_dir)
    return peaks


def percent_of_peak(gflops: float, peaks: Peaks | GpuPeaks, precision: str) -> float | None:
    """`gflops` as a percentage of the matmul peak at `precision`; None where there is none.

    On a CPU: fp32, and bf16 (and amp) where the CPU has bf16 instructions. On a GPU: the
    peak of the cell's precision (gpu_peaks.PEAK_OF_PRECISION; amp is held to fp16's).
    """
    peak = peaks.peak(precision)
    if peak is None or peak[1] <= 0:
        return None
    return 100.0 * gflops / peak[1]


def cell_peaks(
    env_peaks: dict[str, Any] | None, device: str, threads: int
) -> Peaks | GpuPeaks | None:
    """The peaks a cell is held to, from a run's stored `env["peaks"]`: a CPU cell's at its
    thread count (key "2"), a cuda cell's its GPU's (key "cuda"). None where none were
    measured or the record does not read back."""
    value = (env_peaks or {}).get(device if device != "cpu" else str(threads))
    if not value:
        return None
    try:
        return (Peaks if device == "cpu" else GpuPeaks).model_validate(value)
    except ValidationError:
        return None


# GPU peaks: cached beside the CPU's, keyed by the environment's fingerprint and a name for
# the GPU (the environment's fingerprint does not name its GPUs).


def gpu_key(env: dict[str, Any]) -> str:
    """A cache key for the GPU "cuda" means in this environment: the GPUs NVML lists (name
    and uuid) and CUDA_VISIBLE_DEVICES, so another card, or another choice of card, is
    measured afresh. Needs no CUDA context (env comes from stackcost.env.collect)."""
    import hashlib

    gpus = env.get("gpus") or []
    ident = [[g.get("name"), g.get("uuid")] for g in gpus]
    ident.append([os.environ.get("CUDA_VISIBLE_DEVICES")])
    digest = hashlib.sha1(json.dumps(ident).encode()).hexdigest()[:8]
    return f"{gpus[0].get('name') if gpus else 'gpu'}-{digest}"


def gpu_cache_path(fingerprint: str, gpu: str, cache_dir: Path | None = None) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower() or "gpu"
    return (cache_dir or default_cache_dir()) / f"{fingerprint}-gpu-{slug}.json"


def cached_gpu_peaks(
    fingerprint: str, gpu: str, cache_dir: Path | None = None, quick: bool = False
) -> GpuPeaks | None:
    """The cached peaks of the GPU `gpu` names, if any satisfy the request (a quick
    measurement does not satisfy a full one); an unreadable file counts as absent."""
    try:
        text = gpu_cache_path(fingerprint, gpu, cache_dir).read_text()
        cached = GpuPeaks.model_validate_json(text)
    except (OSError, ValidationError):
        return None
    return cached if quick or not cached.quick else None


def store_gpu_peaks(
    fingerprint: str, gpu: str, peaks: GpuPeaks, cache_dir: Path | None = None
) -> bool:
    """Cache `peaks` unless another process used the GPU meanwhile; True when written."""
    if peaks.busy:
        return False
    return _write_atomic(gpu_cache_path(fingerprint, gpu, cache_dir), peaks)


def measure_gpu_peaks_in_child(device: str = "cuda", quick: bool = False) -> GpuPeaks:
    """Measure in a fresh interpreter, so the caller never holds a CUDA context (the runner
    stays out of the GPU its workers measure on). RuntimeError with the child's reason."""
    cmd = [sys.executable, "-m", "stackcost.measure.gpu_peaks", "--device", device]
    done = subprocess.run(
        [*cmd, *(["--quick"] if quick else [])],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(tail[-1] if tail else f"exit status {done.returncode}")
    return GpuPeaks.model_validate(json.loads(done.stdout.strip().splitlines()[-1]))


def load_or_measure_gpu(
    fingerprint: str, gpu: str, cache_dir: Path | None = None, quick: bool = False
) -> GpuPeaks:
    """The peaks of torch's current CUDA device, which `gpu` names (its cache key), from
    the cache or measured once in a child and stored."""
    cached = cached_gpu_peaks(fingerprint, gpu, cache_dir, quick)
    if cached is not None:
        return cached
    peaks = measure_gpu_peaks_in_child("cuda", quick=quick)
    store_gpu_peaks(fingerprint, gpu, peaks, cache_dir)
    return peaks
