"""The worker: one repetition of one cell, in its own process, whatever its scenario.

Usage (by executors only): python -m stackcost.execute.worker TASK.json RESULT.json
Thread variables are set by the parent in this process's environment, so they are in
place before torch, ONNX Runtime or OpenVINO is imported.
"""

from __future__ import annotations

import time

from stackcost.execute.process import guarded, serve
from stackcost.result import RepetitionResult
from stackcost.scenarios.base import Progress
from stackcost.scenarios.task import RepetitionTask, read_task


def run_task(task: RepetitionTask) -> RepetitionResult:
    return guarded(task, _measure)


def _measure(task: RepetitionTask, progress: Progress) -> RepetitionResult:
    """The preamble every scenario shares, then the cell's scenario (scenarios/registry.py):
    threads set, the backend loaded and asked whether it can run the cell before anything
    is built, the memory baseline read."""
    import os

    cpus = os.sched_getaffinity(0)
    import torch

    # With OMP_PROC_BIND set (ab's bursts), libgomp binds this thread to its first core as
    # torch loads. Both sides' workers start at once, so each would then import, build and
    # compile on that one core while the other idled (an eager block's worker: 8.5 s, of it
    # import 4.3 s). Widened again until the scenario times anything (Bench.rebind).
    omp_cpus = frozenset(os.sched_getaffinity(0))
    widened = omp_cpus != cpus
    if widened:
        os.sched_setaffinity(0, cpus)

    from stackcost.backends import load_backend
    from stackcost.measure import memory
    from stackcost.scenarios.base import Bench
    from stackcost.scenarios.registry import scenario_of

    cell = task.cell
    scenario = scenario_of(cell)
    torch.set_num_threads(cell.threads)
    backend = load_backend(cell.backend)
    progress.phases.import_s = time.perf_counter() - progress.started
    problem = backend.why_not(cell)
    if problem is not None:  # decided before any model is built
        return RepetitionResult(status="unsupported", reason=problem)
    bench = Bench(task, backend, progress, memory.rss_bytes(), omp_cpus if widened else None)
    return scenario.run(bench)


if __name__ == "__main__":
    serve(read_task, _measure)
