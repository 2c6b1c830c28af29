"""A repetition to run: everything a worker needs, serialisable as JSON."""

from __future__ import annotations

import json
from typing import ClassVar

from pydantic import BaseModel

from stackcost.allocators import ALLOCATORS, DEFAULT_ALLOCATOR
from stackcost.cell import Cell
from stackcost.measure.protocol import Protocol
from stackcost.result import RateFigures

# How ab's bursts bind torch's OpenMP threads (libgomp): one per core, in order. It halved
# the A/A spread of a 2-thread eager resnet18 per window here (issue 40, noise_structure.py).
OMP_BINDING = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}


class RepetitionTask(BaseModel):
    # The module executors start for this task: python -m WORKER TASK.json RESULT.json.
    # One worker serves every scenario (scenarios/registry.py picks the cell's).
    worker: ClassVar[str] = "stackcost.execute.worker"

    cell: Cell
    repetition: int = 0
    protocol: Protocol = Protocol()
    tolerance: float = 1e-4
    timeout_s: float = 600.0
    workdir: str  # artifacts (ONNX files, compiled packages) for this repetition
    # The run's artifact cache, shared by a cell's repetitions (backends/artifacts.py);
    # None: this repetition exports and compiles its own.
    cache_dir: str | None = None
    # --profile: breakdown, FLOPs and a side-channel sampler at this interval.
    profile: bool = False
    sample_interval_s: float = 0.01
    # Variables the user passes to the worker beyond the whitelist (execute/environ.py).
    inherit_env: list[str] = []
    # ab's burst design (execute/paced.py): the parent paces the timed loop in bursts,
    # commands on the worker's stdin and replies on this inherited file descriptor
    # (measure/bursts.py). None: the protocol's stop rule, as in `run`.
    paced_fd: int | None = None
    # ab's burst design: bind torch's OpenMP threads one per core (OMP_BINDING), where the
    # rung's step runs on that pool (backends.omp_bindable).
    bind_threads: bool = False
    # The worker's memory allocator (stackcost.allocators): its variables are set first,
    # so a backend's own or a thread setting wins a clash.
    allocator: str = DEFAULT_ALLOCATOR
    # A resumed serve repetition: the rates its sweep finished before it stopped (the
    # store's progress), which it keeps and goes on from (serving/sweep.py).
    kept_rates: list[RateFigures] = []

    def thread_env(self) -> dict[str, str]:
        """Variables that must exist before any import: what the backend asks for
        (Backend.environment: its framework's thread pools, flags) and the variables that
        pin framework threads, which win a clash. The executor puts them in the worker's
        environment; the worker records them (details["thread_env"])."""
        from stackcost.backends import environment_of, omp_bindable

        n = str(self.cell.threads)
        bound = OMP_BINDING if self.bind_threads and omp_bindable(self.cell) else {}
        return {
            **ALLOCATORS[self.allocator].env,
            **environment_of(self.cell),
            **bound,
            "OMP_NUM_THREADS": n,
            "MKL_NUM_THREADS": n,
            "OPENBLAS_NUM_THREADS": n,
            # Inductor's compile workers would otherwise fork one per core.
            "TORCHINDUCTOR_COMPILE_THREADS": n,
        }


class TrainTask(RepetitionTask):
    """A training repetition: the task plus where the shared initial weights are."""

    weights_path: str  # state_dict saved once by the parent: every backend starts from it
    weights_digest: str  # what the loaded weights must hash to (zoo.weights_digest)
    data_dir: str | None = None
    # Where to save the trained weights (a state_dict) after the last epoch; None: not kept.
    keep_weights: str | None = None


def read_task(text: str) -> RepetitionTask:
    """A task file as the task it was written as: a train cell's carries its weights."""
    kind = TrainTask if json.loads(text)["cell"].get("mode") == "train" else RepetitionTask
    return kind.model_validate_json(text)
