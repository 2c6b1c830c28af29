"""The scenario contract: what one repetition does with a prepared backend.

The timed loop, each of LoadGen's scenarios and training are scenarios behind this one
interface. The worker's preamble (execute/worker.py) is the same for all of them: the
cell's threads set, its backend loaded and asked whether it can run the cell, the memory
baseline read. It hands the scenario a Bench; the scenario builds what it feeds, asks the
backend for its step in the form it drives (`run_repetition`, `prepare_instances`,
`prepare_train`, or the backend's own training program), measures it under the task's
protocol, and answers one RepetitionResult, built once from its own typed measurement.
registry.py names each scenario, so the worker never asks which one it holds.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stackcost.result import Phases

if TYPE_CHECKING:  # torch is imported only inside worker processes
    import torch

    from stackcost.backends.base import Backend
    from stackcost.cell import Cell
    from stackcost.result import Memory, RepetitionResult
    from stackcost.scenarios.task import RepetitionTask
    from stackcost.verify import Verification
    from stackcost.workload import Workload


@dataclass
class Progress:
    """What a repetition has established so far, kept in its result even when a later
    part fails: the phases timed (from the worker's clock origin) and the weights built."""

    started: float = field(default_factory=time.perf_counter)  # the worker's clock origin
    phases: Phases = field(default_factory=Phases)
    weights_digest: str | None = None


@dataclass(frozen=True)
class MemoryWatch:
    """The process's peak memory from the moment it was reset: the backend's, not the
    build's or the reference forward's."""

    baseline: int  # RSS after imports, before anything was built
    can_reset: bool  # VmHWM could be reset; otherwise the lifetime peak is all there is
    device: str

    def read(self) -> Memory:
        import torch

        from stackcost.measure import memory
        from stackcost.result import Memory

        peak = memory.peak_rss_bytes()
        cuda = self.device == "cuda"
        return Memory(
            baseline_rss_bytes=self.baseline,
            peak_rss_bytes=peak,
            peak_over_baseline_bytes=peak - self.baseline,
            allocator_peak_bytes=int(torch.cuda.max_memory_allocated()) if cuda else None,
            method="VmHWM after reset" if self.can_reset else "ru_maxrss (process lifetime)",
        )


@dataclass(frozen=True)
class Bench:
    """What the worker's preamble hands a scenario: the task, its loaded backend (which
    can run the cell), what the repetition has established so far, and the memory
    baseline."""

    task: RepetitionTask
    backend: Backend
    progress: Progress  # phases are timed into it; kept even if the repetition fails
    baseline_rss: int  # after imports, before anything is built
    # The cores libgomp bound this thread to as torch loaded (OMP_PROC_BIND, ab's bursts),
    # when the worker widened them again for the imports and builds; None: not widened.
    omp_cpus: frozenset[int] | None = None

    @property
    def cell(self) -> Cell:
        return self.task.cell

    @property
    def phases(self) -> Phases:
        return self.progress.phases

    def rebind(self) -> None:
        """This thread back on the cores libgomp bound it to, before anything is timed."""
        if self.omp_cpus is not None:
            os.sched_setaffinity(0, self.omp_cpus)

    def thread_env(self) -> dict[str, str | None]:
        """The thread variables as this process found them: recorded with the result."""
        return {k: os.environ.get(k) for k in self.task.thread_env()}

    def build_model(self, workload: Workload, weights: str | None = None) -> torch.nn.Module:
        """The cell's model, seeded and initialized, or given the state_dict saved at
        `weights`; its weights' digest is kept."""
        import torch

        from stackcost import zoo

        model = zoo.build_model(self.cell.model, self.cell.sizes, workload)
        if weights is not None:
            model.load_state_dict(torch.load(weights, weights_only=True))
        self.progress.weights_digest = zoo.weights_digest(model)
        return model

    def watch_memory(self) -> MemoryWatch:
        """Reset the peak counters (the process's, and CUDA's allocator on GPU): what is
        read from here on is the scenario's own."""
        import torch

        from stackcost.measure import memory

        if self.cell.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        return MemoryWatch(self.baseline_rss, memory.reset_peak(), self.cell.device)


class Scenario(ABC):
    """What a repetition does with a prepared backend step, under the task's protocol."""

    name: str

    @abstractmethod
    def run(self, bench: Bench) -> RepetitionResult:
        """Build what the scenario feeds, prepare the backend's step, measure it, and
        answer the repetition's result (status, numbers, details), built once. The worker
        adds what every repetition carries (phases, weights, times) and settles it."""


def wrong(verification: Verification, tolerance: float) -> str | None:
    """Why an output is wrong against eager's reference, or None when it is within
    tolerance: a wrong output's timings are not valid, whatever scenario took them."""
    from stackcost.verify import worst_output

    if verification.ok:
        return None
    v = verification
    return v.detail or (
        f"max relative error {v.max_rel_err:.3g} > tolerance {tolerance:.3g}" + worst_output(v)
    )
