"""The machine's measured peaks: the ceilings "% of peak" divides by.

On the CPU, the best fp32 (and bf16) GEMM and the memory bandwidth (triad, read) at each
thread count; on a GPU, its matmul peak per precision and its copy bandwidth. Each is
measured once per environment and cached (keyed by the environment's fingerprint, and the
GPU), so a run and `stackcost peaks` read the same numbers. A measurement taken while other
work shared the machine is returned but not cached: a low ceiling must not outlive the
load that caused it. torch is imported only when something is measured."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from stackcost.measure.gpu_peaks import GPU_PRECISIONS, GpuPeaks
from stackcost.measure.peaks import Peaks

__all__ = [
    "GPU_PRECISIONS",
    "GpuPeaks",
    "MachinePeaks",
    "Measuring",
    "Peaks",
    "PeaksReading",
    "PeaksSource",
    "cpu_peaks",
    "gpu_peaks",
]

# Where a reading came from: the cache; or measured now and then cached, or not cached
# because other work shared the machine (busy), or because the cache is not writable.
PeaksSource = Literal["cache", "measured", "busy", "unwritable"]
# Called with a one-line message before each measurement, which runs inside the context
# it returns (the CLI shows a spinner); measuring takes seconds.
Measuring = Callable[[str], AbstractContextManager[Any]]
P = TypeVar("P", Peaks, GpuPeaks)


@dataclass(frozen=True)
class PeaksReading(Generic[P]):
    """One set of peaks (Peaks for a CPU at a thread count, GpuPeaks for a GPU) and where
    it came from."""

    peaks: P
    source: PeaksSource


@dataclass(frozen=True)
class MachinePeaks(Generic[P]):
    """The peaks asked for, and the environment whose fingerprint keys their cache."""

    environment: str  # the environment's fingerprint (stackcost.env)
    readings: list[PeaksReading[P]]  # a CPU's by thread count, fewest first; a GPU's one


def _no_spinner(message: str) -> AbstractContextManager[Any]:
    return nullcontext()


def cpu_peaks(
    threads: Sequence[int] | None = None,
    *,
    quick: bool = False,
    remeasure: bool = False,
    cache_dir: Path | None = None,
    measuring: Measuring = _no_spinner,
) -> MachinePeaks[Peaks]:
    """This machine's CPU peaks at each thread count, from the cache or measured now.

    Args:
        threads: thread counts (default: 1 and every CPU this process may use).
        quick: small sizes, seconds rather than a ceiling; a cached full measurement
            satisfies a quick request, never the reverse.
        remeasure: measure even where the cache holds peaks, and replace them.
        cache_dir: the peaks cache (default: ~/.cache/stackcost/peaks, the one runs use).
        measuring: see `Measuring`.

    Raises:
        SpecError: a thread count below 1 or above the CPUs this process may use
            (before anything is measured).
    """
    from stackcost.env import collect, fingerprint
    from stackcost.measure import peaks as cache
    from stackcost.runspec.run import check_threads

    if threads is None:
        counts = sorted({1, len(os.sched_getaffinity(0))})
    else:
        counts = sorted(set(threads))
        check_threads(counts)  # more than the machine's measures the scheduler, or fails
    env_fp = fingerprint(collect())
    readings = []
    for t in counts:
        found = None if remeasure else cache.cached_peaks(env_fp, t, cache_dir, quick)
        if found is not None:
            readings.append(PeaksReading(found, "cache"))
            continue
        with measuring(f"measuring peaks at {t} thread(s)…"):
            measured = cache.measure_peaks(t, quick=quick)
        stored = cache.store_peaks(env_fp, measured, cache_dir)
        readings.append(PeaksReading(measured, _source(stored, measured.busy)))
    return MachinePeaks(env_fp, readings)


def gpu_peaks(
    *,
    quick: bool = False,
    remeasure: bool = False,
    cache_dir: Path | None = None,
    measuring: Measuring = _no_spinner,
) -> MachinePeaks[GpuPeaks]:
    """The peaks of the GPU "cuda" names here (matmul per precision, copy bandwidth), from
    the cache or measured now in this process, timed with CUDA events.

    Args are those of `cpu_peaks`; a GPU's peaks have no thread count.

    Raises:
        SpecError: where there is no CUDA device (before anything is measured).
    """
    from stackcost.env import collect, fingerprint
    from stackcost.errors import SpecError
    from stackcost.measure import gpu_peaks as gpu
    from stackcost.measure import peaks as cache

    reason = gpu.cuda_unavailable_reason("cuda")
    if reason:
        raise SpecError(f"device 'cuda' is not available here: {reason}; use --device cpu")
    env = collect()
    env_fp, key = fingerprint(env), cache.gpu_key(env)
    found = None if remeasure else cache.cached_gpu_peaks(env_fp, key, cache_dir, quick)
    if found is not None:
        return MachinePeaks(env_fp, [PeaksReading(found, "cache")])
    with measuring("measuring the GPU's peaks (CUDA events)…"):
        measured = gpu.measure_gpu_peaks("cuda", quick=quick)
    stored = cache.store_gpu_peaks(env_fp, key, measured, cache_dir)
    return MachinePeaks(env_fp, [PeaksReading(measured, _source(stored, measured.busy))])


def _source(stored: bool, busy: bool) -> PeaksSource:
    """Where a fresh measurement went: cached, or why not (a busy one is never cached)."""
    if stored:
        return "measured"
    return "busy" if busy else "unwritable"
