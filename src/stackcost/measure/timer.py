"""Timing one step: the host clock on CPU, CUDA events on GPU.

The timed loop is deliberately bare (clock, step, clock, append) so the harness adds
well under a microsecond per iteration; see benchmarks/harness_overhead.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Step = Callable[[], Any]


class CpuTimer:
    """perf_counter_ns around the step; CPU work is done when the call returns."""

    device = "cpu"

    def time_once(self, step: Step) -> tuple[int, Any]:
        t0 = time.perf_counter_ns()
        out = step()
        return time.perf_counter_ns() - t0, out

    def run(self, step: Step, n: int, out: list[int]) -> None:
        clock = time.perf_counter_ns
        append = out.append
        for _ in range(n):
            t0 = clock()
            step()
            append(clock() - t0)


class CudaTimer:
    """CUDA events around each step, read after a synchronize (rule 2: read the clock
    only once the device is done). Exercised only where a GPU exists."""

    device = "cuda"

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def time_once(self, step: Step) -> tuple[int, Any]:
        cuda = self._torch.cuda
        cuda.synchronize()
        t0 = time.perf_counter_ns()
        out = step()
        cuda.synchronize()
        return time.perf_counter_ns() - t0, out

    def run(self, step: Step, n: int, out: list[int]) -> None:
        cuda = self._torch.cuda
        events = [
            (cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(n)
        ]
        cuda.synchronize()
        for start, end in events:
            start.record()
            step()
            end.record()
        cuda.synchronize()
        out.extend(int(start.elapsed_time(end) * 1e6) for start, end in events)


def timer_for(device: str) -> CpuTimer | CudaTimer:
    return CudaTimer() if device == "cuda" else CpuTimer()
