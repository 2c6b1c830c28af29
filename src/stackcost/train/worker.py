"""The training worker: one repetition of one train cell, in its own process.

Usage (by executors only): python -m stackcost.train.worker TASK.json RESULT.json
Same shape as the inference worker: threads pinned by the parent's environment, a failure
is a result, the result goes to RESULT.json. What differs is the measured loop: epochs of
shuffled mini-batches, each timed in three parts (loader wait, host->device copy, step),
then an evaluation pass on the held-out split.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

from stackcost.execute.process import guarded, serve
from stackcost.measure.counters import Edge, Window
from stackcost.measure.disturbance import assess
from stackcost.result import EpochRecord, Memory, Phases, RepetitionResult
from stackcost.train.data import Batches, load_splits
from stackcost.train.record import run_details, set_step_stats, stochastic_layers
from stackcost.train.task import TrainTask

# A loss this many times the first epoch's (the first step's, during epoch 1) has diverged.
DIVERGENCE_FACTOR = 1e3
# The first steps' losses are recorded, for the report's agreement with eager.
FIRST_LOSSES = 10


def run_task(task: TrainTask) -> RepetitionResult:
    return guarded(task, _train)


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class _OptimizerFactory:
    """Builds the torch optimizer inside the backend's prepare_train, and keeps it, so the
    worker can drive the learning-rate schedule per step (backends.base.OptimizerFactory).
    A backend in another framework builds its own from `train` and `total_steps`."""

    def __init__(self, train: Any, total_steps: int) -> None:
        self.train = train
        self.total_steps = total_steps
        self.optimizer: Any = None

    def __call__(self, params: Any) -> Any:
        import torch

        cfg = self.train
        if cfg.optimizer == "sgd":
            self.optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)
        else:
            self.optimizer = torch.optim.Adam(params, lr=cfg.lr)
        return self.optimizer

    def schedule(self) -> Any:
        """A scheduler to step once per training step, or None: a constant rate, or no
        torch optimizer (the backend's framework schedules its own)."""
        import torch

        if self.train.schedule == "constant" or self.optimizer is None:
            return None
        return torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, max(self.total_steps, 1))


def _correct(out: Any, y: Any) -> int:
    """Correct predictions in a step's output: the logits (on y's device), or the count."""
    if isinstance(out, int):
        return out
    return int((out.argmax(1) == y).sum().item())


def _train(task: TrainTask, result: RepetitionResult, phases: Phases, t_start: float) -> None:
    import torch
    import torch.nn.functional as F

    from stackcost import zoo
    from stackcost.backends import PrepareContext, load_backend
    from stackcost.measure import memory

    cell, cfg = task.cell, task.cell.train
    if cfg is None:
        raise ValueError("a train task needs a cell with a train config")
    torch.set_num_threads(cell.threads)
    _seed_everything(cell.model.seed)
    backend = load_backend(cell.backend)
    phases.import_s = time.perf_counter() - t_start
    problem = backend.why_not(cell)
    if problem is not None:  # decided before any data is loaded
        result.status, result.reason = "unsupported", problem
        return
    baseline = memory.rss_bytes()

    t = time.perf_counter()
    workload = zoo.workload_of(cell.model)
    splits = load_splits(cell, workload, task.data_dir)
    # Same initial weights at every level: built once by the parent, loaded here.
    model = zoo.build_model(cell.model, cell.sizes, workload)
    model.load_state_dict(torch.load(task.weights_path, weights_only=True))
    result.weights_digest = zoo.weights_digest(model)
    if result.weights_digest != task.weights_digest:
        raise RuntimeError(
            f"loaded weights hash to {result.weights_digest}, expected {task.weights_digest}"
        )
    phases.build_s = time.perf_counter() - t
    if backend.train_repetition(model, splits, task, result, phases):
        return  # the backend ran every epoch itself (a C++ program)
    device = torch.device(cell.device)
    cuda = cell.device == "cuda"
    model = model.to(device).train()
    train = Batches(splits["train"], cell.batch_size, True)
    test = Batches(splits["test"], cell.batch_size, False)
    if len(train) == 0:
        raise ValueError(
            f"{len(splits['train'])} training samples make no full batch of {cell.batch_size}"
        )
    example = train.get(train.order(None), 0)[0].to(device)  # what torchscript traces
    phases.build_s = time.perf_counter() - t

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    can_reset = memory.reset_peak()
    t = time.perf_counter()
    ctx = PrepareContext(workdir=Path(task.workdir))
    optimizer = _OptimizerFactory(cfg, cfg.epochs * len(train))
    prepared = backend.prepare_train(model, optimizer, F.cross_entropy, example, cell, ctx)
    scheduler = optimizer.schedule()
    phases.prepare_s = time.perf_counter() - t

    def place(x: Any, y: Any) -> tuple[Any, Any]:
        if prepared.place is not None:
            return prepared.place(x, y)
        return x.map(lambda t: t.to(device, non_blocking=cuda)), y.to(device, non_blocking=cuda)

    result.details = {
        **prepared.details,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        **run_details(task, splits),
        "stochastic_layers": stochastic_layers(model),
    }

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    clock = time.perf_counter_ns
    samples_ns: list[int] = []
    first_losses: list[float] = []
    result.details["first_losses"] = first_losses  # filled as the steps run
    reference: float | None = None  # loss the divergence rule compares against
    t_loop = time.perf_counter()
    first = Edge.now()
    for epoch in range(1, cfg.epochs + 1):
        generator = torch.Generator().manual_seed(cfg.data_seed + epoch)
        order = train.order(generator)
        wait_ns = copy_ns = step_ns = 0
        losses: list[float] = []
        correct = seen = 0
        copy_bytes = 0
        diverged = ""
        t_epoch = clock()
        for i in range(len(train)):
            t0 = clock()
            x, y = train.get(order, i)
            if cuda and prepared.place is None:  # pinned: the copy runs asynchronously
                x, y = x.map(lambda t: t.pin_memory()), y.pin_memory()
            t1 = clock()
            placed_x, placed_y = place(x, y)
            sync()
            t2 = clock()
            loss, out = prepared.step(placed_x, placed_y)
            sync()
            t3 = clock()
            if scheduler is not None:
                scheduler.step()
            wait_ns, copy_ns, step_ns = wait_ns + t1 - t0, copy_ns + t2 - t1, step_ns + t3 - t2
            copy_bytes += x.nbytes() + y.nbytes
            if result.cold_start_ms is None:  # first step, compile included: its own number
                result.cold_start_ms = (t3 - t2) / 1e6
            else:
                samples_ns.append(t3 - t2)
            value = float(loss)
            losses.append(value)
            if len(first_losses) < FIRST_LOSSES:
                first_losses.append(value)
            # Torch levels' labels are already on the logits' device; others' stay torch.
            correct += _correct(out, y if prepared.place else placed_y)
            seen += len(y)
            if reference is None:
                reference = value
            if not math.isfinite(value):
                diverged = f"loss {value} at epoch {epoch} step {i + 1}"
            elif value > DIVERGENCE_FACTOR * reference:
                diverged = (
                    f"loss {value:.3g} > {DIVERGENCE_FACTOR:g} x {reference:.3g} "
                    f"at epoch {epoch} step {i + 1}"
                )
            if diverged:
                break
        train_ns = clock() - t_epoch
        steps = len(losses)
        record: dict[str, Any] = dict(
            epoch=epoch,
            complete=not diverged,
            steps=steps,
            train_samples=seen,
            train_loss=sum(losses) / steps,
            train_accuracy=correct / seen,
            train_s=train_ns / 1e9,
            loader_wait_s=wait_ns / 1e9,
            step_s=step_ns / 1e9,
            train_samples_per_s=seen / (train_ns / 1e9),
            copy_bytes_per_batch=copy_bytes / steps,
            copy_ms_per_batch=copy_ns / steps / 1e6,
            copy_device=cell.device,
            copy_pinned=True if cuda else None,
        )
        if diverged:
            result.epochs.append(EpochRecord(epoch_s=train_ns / 1e9, **record))
            result.status, result.reason = "diverged", diverged
            result.details["diverged_epoch"] = epoch
            break
        if epoch == 1:
            reference = sum(losses) / steps
        t_eval = clock()
        eval_correct, eval_loss = 0, 0.0
        eval_order = test.order(None)
        for i in range(len(test)):
            x, y = test.get(eval_order, i)
            logits = prepared.evaluate(place(x, y)[0])
            y = y.to(logits.device)
            eval_loss += float(F.cross_entropy(logits, y, reduction="sum").item())
            eval_correct += int((logits.argmax(1) == y).sum().item())
        eval_ns = clock() - t_eval
        n_eval = len(test.labels)
        result.epochs.append(
            EpochRecord(
                epoch_s=(train_ns + eval_ns) / 1e9,
                eval_accuracy=eval_correct / n_eval if n_eval else None,
                eval_loss=eval_loss / n_eval if n_eval else None,
                eval_samples=n_eval,
                eval_s=eval_ns / 1e9,
                eval_samples_per_s=n_eval / (eval_ns / 1e9) if n_eval else None,
                **record,
            )
        )
    phases.timed_s = time.perf_counter() - t_loop
    result.disturbance = assess(Window.between(first, Edge.now()))

    peak = memory.peak_rss_bytes()
    result.memory = Memory(
        baseline_rss_bytes=baseline,
        peak_rss_bytes=peak,
        peak_over_baseline_bytes=peak - baseline,
        allocator_peak_bytes=int(torch.cuda.max_memory_allocated()) if cuda else None,
        method="VmHWM after reset" if can_reset else "ru_maxrss (process lifetime)",
    )
    set_step_stats(result, samples_ns, cell.batch_size)
    result.stop_reason = f"{len(result.epochs)} epochs"
    if result.status != "diverged":
        result.status = "ok"


if __name__ == "__main__":
    serve(TrainTask, _train)
