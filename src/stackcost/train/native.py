"""Training at the C++ levels: the program runs every epoch; this turns its answer into
the same records the Python levels produce (epochs, per-step stats, memory, divergence)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.measure.counters import Edge, Window
from stackcost.measure.disturbance import assess
from stackcost.result import Phases, RepetitionResult
from stackcost.train.record import run_details, set_step_stats
from stackcost.train.task import TrainTask

if TYPE_CHECKING:
    import torch

    from stackcost.backends.native import NativeBackend


def train_native(
    backend: NativeBackend,
    model: torch.nn.Module,
    splits: dict[str, Any],
    task: TrainTask,
    result: RepetitionResult,
    phases: Phases,
) -> None:
    from stackcost.backends import PrepareContext
    from stackcost.backends.native import native_memory
    from stackcost.native.training import epoch_records

    cell = task.cell
    # The program's whole run is the window: its CPU arrives as a reaped child's.
    first = Edge.now()
    train, test = splits["train"].dataset, splits["test"].dataset
    if train is None or test is None:  # why_not refuses non-image models before this
        raise ValueError(f"{backend.name} trains on image datasets only")
    answer = backend.run_native_train(
        model,
        (train.images, train.labels),
        (test.images, test.labels),
        cell,
        PrepareContext(workdir=Path(task.workdir)),
        task.timeout_s,
    )
    result.disturbance = assess(Window.between(first, Edge.now()))
    details = answer["details"]
    phases.prepare_s = details["build_s"] + details["export_s"]
    phases.timed_s = answer["process_s"]
    result.details = {**details, **run_details(task, splits), "loop": "in the C++ program"}
    result.epochs = epoch_records(answer, cell.device)
    result.cold_start_ms = answer["cold_ns"] / 1e6
    set_step_stats(result, [int(s) for s in answer["samples_ns"]], cell.batch_size)
    result.memory = native_memory(answer)
    result.stop_reason = f"{len(result.epochs)} epochs"
    if answer.get("diverged"):
        result.status, result.reason = "diverged", answer["diverged"]
        result.details["diverged_epoch"] = result.epochs[-1].epoch if result.epochs else None
    else:
        result.status = "ok"
