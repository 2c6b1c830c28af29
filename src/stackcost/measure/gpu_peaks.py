"""A GPU's measured peaks: dense-matmul FLOP/s per precision and device memory bandwidth.

The CPU's ceilings (peaks.py) are measured with torch on the machine itself; so are the
GPU's, for the same reason: a datasheet's peak is not what cuBLAS reaches on this card at
its clocks, power limit and cooling. Each precision a cuda cell can run at gets its own
ceiling, because they differ by an order of magnitude on a tensor-core GPU:

- fp32: torch.mm of float32 matrices with TF32 off (`torch.backends.cuda.matmul.
  fp32_precision = "ieee"`): plain FP32 FMA units;
- tf32: the same float32 matmul with `fp32_precision = "tf32"` (tensor cores, 10-bit
  mantissa inputs);
- bf16, fp16: torch.mm of bfloat16 / float16 matrices (tensor cores; torch's default of
  allowing reduced-precision reductions, which cells run under too);
- bandwidth: a device-to-device copy (`dst.copy_(src)`) of buffers far larger than L2,
  counted as bytes read + bytes written over the time.

Every call is timed with CUDA events (one start/end pair per call, read after one
synchronize), after warmup calls; the peak is the median of the timed calls, and the best
is kept beside it. Median, not best: a GPU's clocks move with its temperature and power,
and one lucky call is not a ceiling it sustains.

The building blocks take the device and the size, so the arithmetic (FLOPs per call,
units) runs on "cpu" at a tiny size in tests; `measure_gpu_peaks` itself needs CUDA.
`python -m stackcost.measure.gpu_peaks [--quick]` prints the peaks as JSON: the runner
measures in such a child, so its own process never holds a CUDA context.

torch is imported inside the functions: the CLI imports this module without paying for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pydantic import BaseModel

from stackcost.env import now

GPU_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
GEMM_N, GEMM_N_QUICK = 8192, 2048
COPY_BYTES, COPY_BYTES_QUICK = 1 << 30, 64 << 20  # per buffer: L2 is tens of MiB
WARMUP, GEMM_RUNS, COPY_RUNS = 5, 20, 50

# A cell's precision -> the GPU peak it is held to. "amp" runs each call under
# torch.autocast, in float16 on CUDA (backends/torch_common.AUTOCAST_DTYPE; a test keeps the
# two in step), so its matmuls and convolutions are held to fp16's. A precision not here (a
# quantized one, or a name added later) has no peak.
PEAK_OF_PRECISION = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "amp": "fp16", "fp16": "fp16"}


class GpuPeaks(BaseModel):
    """Sustained throughput of one GPU, measured with CUDA events. FLOP/s in GFLOP/s (the
    unit of the CPU's Peaks and of a cell's achieved_gflops); bandwidth in GB/s (1e9)."""

    device: str  # the torch device measured, e.g. "cuda:0"
    name: str  # torch.cuda.get_device_name
    basis: str = "measured"  # never a datasheet figure
    fp32_gflops: float  # TF32 off
    tf32_gflops: float
    bf16_gflops: float
    fp16_gflops: float
    best_gflops: dict[str, float]  # the fastest single call per precision, for reference
    copy_gbs: float  # device-to-device copy: (read + write) bytes / time
    gemm_n: int
    copy_bytes: int  # bytes per buffer
    gemm_method: str
    copy_method: str
    torch: str
    cuda: str | None
    measured_at: str  # ISO 8601, UTC
    seconds: float
    quick: bool = False
    # Other processes using the GPU while measuring (NVML; None: NVML could not say).
    other_processes: int | None = None

    @property
    def busy(self) -> bool:
        """Measured while another process had work on the GPU."""
        return bool(self.other_processes)

    @property
    def stream_gbs(self) -> float:
        """The roofline's bandwidth roof: for a GPU, the device-to-device copy's."""
        return self.copy_gbs

    def peak(self, precision: str) -> tuple[str, float] | None:
        """(what the peak is, GFLOP/s) for a cell at `precision`; None where there is none."""
        which = PEAK_OF_PRECISION.get(precision)
        if which is None:
            return None
        return f"{which} matmul, {self.name}", getattr(self, f"{which}_gflops")


@dataclass(frozen=True)
class Timed:
    """One measured kernel: its per-call times (ms) and the work of one call."""

    ms: list[float]
    work: float  # FLOPs, or bytes, per call

    @property
    def median_rate(self) -> float:
        """Work per second at the median call, in units of 1e9 (GFLOP/s or GB/s)."""
        return self.work / (statistics.median(self.ms) / 1e3) / 1e9

    @property
    def best_rate(self) -> float:
        return self.work / (min(self.ms) / 1e3) / 1e9


def time_calls(fn: Callable[[], object], device: str, warmup: int, runs: int) -> list[float]:
    """Milliseconds of each of `runs` calls of `fn` after `warmup` untimed ones.

    The engine's own timers (measure/timer.py): on CUDA an event pair around each call,
    queued back to back (the GPU never idles between calls, as in a sustained run) and read
    after one synchronize of the current device (the caller's `torch.cuda.device`); on CPU
    (a dry run of the arithmetic) perf_counter around each call.
    """
    from stackcost.measure.timer import timer_for

    for _ in range(warmup):
        fn()
    ns: list[int] = []
    timer_for("cuda" if device.startswith("cuda") else "cpu").run(fn, runs, ns)
    return [t / 1e6 for t in ns]


@contextlib.contextmanager
def fp32_matmul_precision(precision: str) -> Iterator[str]:
    """float32 matmuls on CUDA in TF32 ("tf32") or full FP32 ("ieee") inside; the caller's
    setting restored after. Yields the setting made, in words, for the method text."""
    import torch

    m = torch.backends.cuda.matmul
    want = "tf32" if precision == "tf32" else "ieee"
    if hasattr(m, "fp32_precision"):  # torch >= 2.9
        before = m.fp32_precision
        m.fp32_precision = want
        try:
            yield f'torch.backends.cuda.matmul.fp32_precision = "{want}"'
        finally:
            m.fp32_precision = before
    else:
        before_allow = m.allow_tf32
        m.allow_tf32 = want == "tf32"
        try:
            yield f"torch.backends.cuda.matmul.allow_tf32 = {want == 'tf32'}"
        finally:
            m.allow_tf32 = before_allow


def matmul_flops(n: int) -> int:
    """FLOPs of one n x n by n x n matmul: n^3 multiply-adds, 2 FLOPs each."""
    return 2 * n**3


def matmul_peak(
    device: str, n: int, precision: str, warmup: int = WARMUP, runs: int = GEMM_RUNS
) -> Timed:
    """Time torch.mm(a, b, out=c) of two n x n matrices at `precision` on `device`."""
    import torch

    if precision not in GPU_PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(GPU_PRECISIONS)}")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    g = torch.Generator(device=device).manual_seed(0)  # private: the caller's RNG is theirs
    a = torch.randn(n, n, generator=g, device=device).to(dtype)
    b = torch.randn(n, n, generator=g, device=device).to(dtype)
    c = torch.empty(n, n, dtype=dtype, device=device)
    with fp32_matmul_precision(precision):
        ms = time_calls(lambda: torch.mm(a, b, out=c), device, warmup, runs)
    return Timed(ms, float(matmul_flops(n)))


def copy_peak(device: str, nbytes: int, warmup: int = WARMUP, runs: int = COPY_RUNS) -> Timed:
    """Time dst.copy_(src) of two float32 buffers of `nbytes` each on `device`; the work
    of one call is 2 x nbytes (every byte read once and written once)."""
    import torch

    n = max(nbytes // 4, 1)
    # Filled, not empty: every page is touched before timing.
    src = torch.full((n,), 1.0, device=device)
    dst = torch.zeros(n, device=device)
    ms = time_calls(lambda: dst.copy_(src), device, warmup, runs)
    return Timed(ms, float(2 * n * 4))


def _other_gpu_processes(index: int) -> int | None:
    """How many other processes have work on GPU `index` (NVML); None if NVML can't say.

    In a container NVML reports the host's process ids, so this process may not be found
    by its own id: then, if torch has a CUDA context here, one of the processes is taken to
    be this one."""
    import torch

    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 (no NVML, or no driver: unknown, not zero)
        return None
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        pids = {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)}
        if os.getpid() in pids:
            return len(pids) - 1
        return max(len(pids) - int(torch.cuda.is_initialized()), 0)
    except Exception:  # noqa: BLE001
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def cuda_unavailable_reason(device: str = "cuda") -> str | None:
    """Why `device` cannot be measured here, or None when it can."""
    import torch

    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no NVIDIA GPU, or a CPU build of torch)"
    index = torch.device(device).index or 0
    if index >= torch.cuda.device_count():
        return f"{device}: this machine has {torch.cuda.device_count()} CUDA device(s)"
    return None


def measure_gpu_peaks(device: str = "cuda", quick: bool = False) -> GpuPeaks:
    """Measure one GPU's matmul peaks (fp32, tf32, bf16, fp16) and copy bandwidth.

    About 3 s on an H100 (quick: under 1 s, but 2048^3 matmuls do not fill the GPU: not a
    ceiling). RuntimeError where CUDA is not there.
    """
    import torch

    reason = cuda_unavailable_reason(device)
    if reason:
        raise RuntimeError(f"cannot measure GPU peaks on {device}: {reason}")
    start = time.perf_counter()
    dev = torch.device(device)
    # Asked before this process touches the GPU (current_device() creates a context).
    others = _other_gpu_processes(dev.index or 0)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    device = f"cuda:{index}"
    n = GEMM_N_QUICK if quick else GEMM_N
    nbytes = COPY_BYTES_QUICK if quick else COPY_BYTES
    with torch.cuda.device(index):
        gemm: dict[str, Timed] = {}
        settings = []
        for precision in GPU_PRECISIONS:
            if precision in ("fp32", "tf32"):
                with fp32_matmul_precision(precision) as said:
                    settings.append(f"{precision}: {said}")
            gemm[precision] = matmul_peak(device, n, precision)
            torch.cuda.empty_cache()
        copy = copy_peak(device, nbytes)
        torch.cuda.empty_cache()
        after = _other_gpu_processes(index)
    if others is not None and after is not None:
        others = max(others, after)
    reduced = (
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    )
    return GpuPeaks(
        device=device,
        name=torch.cuda.get_device_name(index),
        fp32_gflops=gemm["fp32"].median_rate,
        tf32_gflops=gemm["tf32"].median_rate,
        bf16_gflops=gemm["bf16"].median_rate,
        fp16_gflops=gemm["fp16"].median_rate,
        best_gflops={p: t.best_rate for p, t in gemm.items()},
        copy_gbs=copy.median_rate,
        gemm_n=n,
        copy_bytes=nbytes,
        gemm_method=(
            f"torch.mm of two {n}x{n} matrices (out= preallocated, randn values), "
            f"2*n^3 FLOPs per call; median of {GEMM_RUNS} calls after {WARMUP} warmup, each "
            f"timed by a CUDA event pair; {'; '.join(settings)}; fp16/bf16 reduced-precision "
            f"reductions allowed: {reduced[0]}/{reduced[1]} (torch's defaults)"
            + ("; quick: a matrix this small may not fill the GPU" if quick else "")
        ),
        copy_method=(
            f"dst.copy_(src) of two float32 buffers of {nbytes / 2**20:,.0f} MiB each on "
            f"the device; 2 x buffer bytes per call (read + write); median of {COPY_RUNS} calls "
            f"after {WARMUP} warmup, each timed by a CUDA event pair"
        ),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        measured_at=now(),
        seconds=time.perf_counter() - start,
        quick=quick,
        other_processes=others,
    )


def main(argv: list[str] | None = None) -> int:
    """Measure in this (fresh) process and print the peaks as one JSON object."""
    ap = argparse.ArgumentParser(description="measure a GPU's peaks, print them as JSON")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    try:
        peaks = measure_gpu_peaks(args.device, quick=args.quick)
    except RuntimeError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(json.dumps(peaks.model_dump(mode="json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
