"""--profile: where a measured cell's time goes, after its timed loop has finished.

The timed loop stays unprofiled (a profiler would change what it measures); the
breakdown comes from a separate short profiled pass over the same prepared step. FLOPs
are counted on the eager model with the cell's shapes: every backend runs the same
network, so the same work, and achieved FLOP/s = FLOPs / the backend's own median.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import Backend, Run
    from stackcost.cell import Cell
    from stackcost.measure.energy import Energy
    from stackcost.measure.flops import Work
    from stackcost.measure.protocol import Measurement
    from stackcost.measure.sampler import Sampler
    from stackcost.measure.stats import Stats
    from stackcost.measure.telemetry import Telemetry
    from stackcost.profile.breakdown import Breakdown
    from stackcost.scenarios.task import RepetitionTask
    from stackcost.workload import Example

# Profiled iterations: enough to average over, few enough to add seconds, not minutes.
PROFILE_ITERS = 10


def work(
    model: torch.nn.Module, example: Example, cell: Cell, stats: Stats | None
) -> tuple[Work, float | None]:
    """FLOPs and estimated bytes of one call, and the achieved GFLOP/s at the median.

    A torch rung casts the model it is handed in place (`module.to(bf16)`) and feeds a cast
    copy of the inputs to its own step, so a bf16/fp16 cell's model here no longer takes
    the fp32 example: the inputs are cast to the model's floating dtype to count."""
    import torch

    from stackcost.measure.flops import count_work

    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if dtype in (torch.bfloat16, torch.float16):
        example = example.cast(dtype)
    counted = count_work(model, example, cell.mode)
    if stats is None or stats.median_ms <= 0:
        return counted, None
    return counted, counted.flops / (stats.median_ms / 1e3) / 1e9


def breakdown(backend: Backend, run: Run, cell: Cell) -> tuple[Breakdown | None, list[str]]:
    """The step's time split (kernels vs overhead on CPU), by the backend's `breakdown`
    (torch.profiler, its own profiler, or a native program's timeline), and notes saying
    why there is none or why it does not cover the wall time."""
    from stackcost.backends.base import NoBreakdown

    try:
        b = backend.breakdown(run, cell, PROFILE_ITERS)
    except NoBreakdown as exc:
        return None, [f"no breakdown: {exc}"]
    if b is None or b.check():
        return b, []
    return b, [
        f"breakdown covers {b.covered():.1%} of the wall time: remainder "
        f"{b.remainder_ms:.3g} ms is more than 5%"
    ]


@contextmanager
def sampling(task: RepetitionTask) -> Iterator[Sampler | None]:
    """The side-channel sampler around the measurement (--profile only): a separate
    process reading this process's (and its children's) CPU time and RSS, and NVML."""
    if not task.profile:
        yield None
        return
    from stackcost.measure.sampler import Sampler

    Path(task.workdir).mkdir(parents=True, exist_ok=True)
    with Sampler(
        os.getpid(),
        task.sample_interval_s,
        Path(task.workdir) / "telemetry.jsonl",
        threads=task.cell.threads,
    ) as sampler:
        yield sampler


def telemetry(
    sampler: Sampler, m: Measurement, cell: Cell
) -> tuple[Telemetry, Energy | None, list[str]]:
    """Utilization and energy over the timed loop, and a note when there is no energy.

    The loop's edges and its CPU counters come from the measurement itself (Python's
    timed loop, or the C++ program's, on the same CLOCK_MONOTONIC), so the means are
    exact. Without them (an older program) the window ends at the "timed_end" mark and
    the means are interpolated from the samples.
    """
    from stackcost.measure.energy import energy_from_telemetry

    if m.window is not None:
        window = (m.window.start_ns, m.window.end_ns)
    else:
        end = sampler.marks["timed_end"]
        window = (end - int(m.timed_s * 1e9), end)
    summary = sampler.summary(*window, threads=cell.threads, counters=m.window)
    device = "cpu" if cell.device == "cpu" else "cuda:0"
    busy = summary.cpu_util_cores_mean if m.window is not None else None
    try:
        energy = energy_from_telemetry(
            sampler.samples,
            window,
            cell.batch_size * len(m.samples_ns),
            device,
            busy_cores=busy,
        )
    except ValueError as exc:  # e.g. a window shorter than two samples
        return summary, None, [f"no energy: {exc}"]
    return summary, energy, []
