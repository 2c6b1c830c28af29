"""Training as a scenario: epochs of shuffled mini-batches through the backend's train step.

Every backend starts from the same initial weights (saved once by the parent) and sees
the same batches in the same order. Each step is timed in three parts (loader wait,
host->device copy, step), and each epoch ends with an evaluation pass on the held-out
split. A backend whose own program runs every epoch (the native rungs) answers the same
TrainRun from `train_repetition`; this module records both alike.
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.scenarios.base import Bench, Scenario

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import TrainPrepared, TrainRun
    from stackcost.backends.torch_common import Numerics
    from stackcost.cell import Cell, TrainConfig
    from stackcost.data.splits import Batches, Split
    from stackcost.result import EpochRecord, RepetitionResult
    from stackcost.scenarios.task import TrainTask
    from stackcost.workload import Example

TRAIN = "train"
# A loss this many times the first epoch's (the first step's, during epoch 1) has diverged.
DIVERGENCE_FACTOR = 1e3
# The first steps' losses are recorded, for the report's agreement with eager.
FIRST_LOSSES = 10
# The file a kept training's weights are saved as, in their artifact directory; a causal
# LM trained on text is kept as a checkpoint folder (`stackcost run hf:DIR` loads it).
KEPT_WEIGHTS = "weights.pt"
KEPT_CHECKPOINT = "checkpoint"
# The rungs whose training step is torch autograd over the model, in this module's loop:
# the ones that train a causal LM on text (their loss is `cross_entropy` per token).
TEXT_TRAINERS = ("eager", "inductor", "torchscript")


class Training(Scenario):
    name = TRAIN

    def run(self, bench: Bench) -> RepetitionResult:
        from stackcost import zoo
        from stackcost.backends import PrepareContext
        from stackcost.data.splits import load_splits
        from stackcost.measure.disturbance import assess
        from stackcost.measure.stats import summarize
        from stackcost.result import RepetitionResult
        from stackcost.scenarios.task import TrainTask

        task, cell = bench.task, bench.cell
        if cell.train is None or not isinstance(task, TrainTask):
            raise ValueError("a train task needs a cell with a train config")
        _seed_everything(cell.model.seed)
        t = time.perf_counter()
        workload = zoo.workload_of(cell.model)
        splits = load_splits(cell, workload, task.data_dir)
        # Same initial weights at every level: built once by the parent, loaded here.
        model = bench.build_model(workload, task.weights_path)
        if bench.progress.weights_digest != task.weights_digest:
            raise RuntimeError(
                f"loaded weights hash to {bench.progress.weights_digest}, "
                f"expected {task.weights_digest}"
            )
        bench.phases.build_s = time.perf_counter() - t
        ctx = PrepareContext(workdir=Path(task.workdir))
        run = bench.backend.train_repetition(model, splits, cell, ctx, task.timeout_s)
        if run is None:  # the loop is this scenario's, over the backend's train step
            run = _loop(bench, model, splits, t)
            if task.keep_weights and not run.diverged:
                keep = _save_checkpoint if kept_name(cell) == KEPT_CHECKPOINT else _save_weights
                keep(model, splits["train"], Path(task.keep_weights))
        bench.phases.prepare_s, bench.phases.timed_s = run.prepare_s, run.timed_s
        disturbance = assess(run.window)
        stats = summarize(run.samples_ns) if run.samples_ns else None
        details = {**run.details, **run_details(task, splits), **run.loop}
        if run.diverged:
            details["diverged_epoch"] = run.epochs[-1].epoch if run.epochs else None
        return RepetitionResult(
            status="diverged" if run.diverged else "ok",
            reason=run.diverged,
            cold_start_ms=run.cold_ns / 1e6,
            stop_reason=f"{len(run.epochs)} epochs",
            stats=stats,
            throughput=cell.batch_size / (stats.median_ms / 1e3) if stats else None,
            samples_ns=run.samples_ns,
            memory=run.memory,
            details=details,
            epochs=run.epochs,
            disturbance=disturbance,
        )


def weights_recipe(cell: Cell) -> dict[str, Any]:
    """What a training cell's trained weights are a function of: the key they are kept
    under (`stackcost train --keep-weights`). Not the backend or threads: the eager rung's
    weights are kept, and threads only reorder float sums."""
    assert cell.train is not None
    return {
        "artifact": "trained-weights",
        "model": cell.model.key_data(),
        "sizes": dict(cell.sizes),
        "batch_size": cell.batch_size,
        "device": cell.device,
        "train": cell.train.model_dump(mode="json"),
    }


def kept_name(cell: Cell) -> str:
    """What a training cell's kept weights are called in their artifact directory: a
    checkpoint folder for a model trained on text, else a state_dict file."""
    from stackcost.data import DATASETS

    assert cell.train is not None
    return KEPT_CHECKPOINT if DATASETS[cell.train.dataset].fed == "text" else KEPT_WEIGHTS


def kept_weights(root: Path, cell: Cell) -> Path | None:
    """The weights kept in the artifact cache `root` for this cell's recipe, or None."""
    from stackcost.backends.artifacts import RECORD, digest

    home = root / digest(weights_recipe(cell))
    return home / kept_name(cell) if (home / RECORD).exists() else None


def _save_weights(model: torch.nn.Module, split: Split, path: Path) -> None:
    """The trained state_dict, written whole or not at all (renamed into place)."""
    import torch

    part = path.with_name(path.name + ".part")
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, part)
    part.rename(path)


def _save_checkpoint(model: torch.nn.Module, split: Split, path: Path) -> None:
    """A trained causal LM as transformers' `save_pretrained` folder (config, safetensors)
    with the tokenizer it learnt from, written whole or not at all (renamed into place)."""
    import shutil

    from transformers import PreTrainedTokenizerFast

    from stackcost.data.stdlib_text import END_OF_TEXT

    part = path.with_name(path.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    model.config.architectures = [type(model).__name__]
    eos = split.tokenizer.token_to_id(END_OF_TEXT)
    model.config.bos_token_id = model.config.eos_token_id = eos
    model.save_pretrained(part)
    PreTrainedTokenizerFast(
        tokenizer_object=split.tokenizer, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT
    ).save_pretrained(part)
    # A retried repetition (one disturbed before it) replaces its try's folder, as a
    # state_dict file is replaced by its rename.
    shutil.rmtree(path, ignore_errors=True)
    part.rename(path)


def run_details(task: TrainTask, splits: dict[str, Split]) -> dict[str, Any]:
    """What every level records about the run: threads, schedule, seeds and data."""
    cell, cfg = task.cell, task.cell.train
    assert cfg is not None
    return {
        "thread_env": {k: os.environ.get(k) for k in task.thread_env()},
        "lr_schedule": cfg.schedule,
        "seeds": {
            "model": cell.model.seed,
            "torch_numpy_random": cell.model.seed,
            "shuffle": f"torch.Generator().manual_seed({cfg.data_seed} + epoch)",
        },
        "data": {
            "dataset": cfg.dataset,
            "source": splits["train"].source,
            "train_samples": len(splits["train"]),
            "test_samples": len(splits["test"]),
            "drop_last": True,
            "scale": splits["train"].scale,
            "inputs": splits["train"].inputs.record(),  # every sample of the split
            **({"text": {k: s.text for k, s in splits.items()}} if splits["train"].text else {}),
        },
    }


def stochastic_layers(model: torch.nn.Module) -> list[str]:
    """The model's layers that draw random masks in training (dropout with p > 0): each
    framework draws its own, so their losses are not compared across levels."""
    import torch

    kinds = (torch.nn.modules.dropout._DropoutNd,)
    return sorted({type(m).__name__ for m in model.modules() if isinstance(m, kinds) and m.p > 0})


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class _OptimizerFactory:
    """Builds the torch optimizer inside the backend's prepare_train, and keeps it, so the
    loop can drive the learning-rate schedule per step (backends.base.OptimizerFactory).
    A backend in another framework builds its own from `train` and `total_steps`."""

    def __init__(self, train: TrainConfig, total_steps: int) -> None:
        self.train = train
        self.total_steps = total_steps
        self.optimizer: torch.optim.Optimizer | None = None

    def __call__(self, params: Any) -> torch.optim.Optimizer:
        import torch

        cfg = self.train
        if cfg.optimizer == "sgd":
            self.optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)
        else:
            self.optimizer = torch.optim.Adam(params, lr=cfg.lr)
        return self.optimizer

    def schedule(self) -> torch.optim.lr_scheduler.LRScheduler | None:
        """A scheduler to step once per training step, or None: a constant rate, or no
        torch optimizer (the backend's framework schedules its own)."""
        import torch

        if self.train.schedule == "constant" or self.optimizer is None:
            return None
        return torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, max(self.total_steps, 1))


def cross_entropy(logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """The loss of every level: one class per sample ((B, C) logits, (B,) labels) or one
    per position ((B, T, V) logits of a causal LM, (B, T) next tokens), flattened alike."""
    import torch.nn.functional as F

    return F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction=reduction)


def _correct(out: Any, y: torch.Tensor) -> int:
    """Correct predictions in a step's output (a sample's class, or a position's next
    token): the logits (on y's device), or the count."""
    if isinstance(out, int):
        return out
    return int((out.argmax(-1) == y).sum().item())


def _loop(bench: Bench, model: torch.nn.Module, splits: dict[str, Split], t: float) -> TrainRun:
    """The epochs in this process, over `prepare_train`'s step; `t`: when the build began."""
    import torch

    from stackcost.backends.base import TrainRun
    from stackcost.measure.counters import Edge, Window

    cell = bench.cell
    model = model.to(torch.device(cell.device)).train()
    train, test, example = _batches(cell, splits)
    bench.phases.build_s = time.perf_counter() - t

    watch = bench.watch_memory()
    t = time.perf_counter()
    prepared, scheduler, fp32_math = _prepare(bench, model, example, len(train))
    prepare_s = time.perf_counter() - t

    epochs = _Epochs(cell, prepared, scheduler, train, test)
    details = {
        **prepared.details,
        **fp32_math.details(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
    }
    random_layers = stochastic_layers(model)
    t_loop = time.perf_counter()
    first = Edge.now()
    records = epochs.run()
    timed_s = time.perf_counter() - t_loop
    window = Window.between(first, Edge.now())
    return TrainRun(
        epochs=records,
        samples_ns=epochs.samples_ns,
        cold_ns=epochs.cold_ns or 0,
        prepare_s=prepare_s,
        timed_s=timed_s,
        details=details,
        loop={"stochastic_layers": random_layers, "first_losses": epochs.first_losses},
        memory=watch.read(),
        window=window,
        diverged=epochs.diverged,
    )


def _batches(cell: Cell, splits: dict[str, Split]) -> tuple[Batches, Batches, Example]:
    """The training batches (shuffled, full ones only), the evaluation batches, and the
    first training batch's inputs on the device: what torchscript traces."""
    import torch

    from stackcost.data.splits import Batches

    train = Batches(splits["train"], cell.batch_size, True)
    test = Batches(splits["test"], cell.batch_size, False)
    if len(train) == 0:
        raise ValueError(
            f"{len(splits['train'])} training samples make no full batch of {cell.batch_size}"
        )
    example = train.get(train.order(None), 0)[0].to(torch.device(cell.device))
    return train, test, example


def _prepare(
    bench: Bench, model: torch.nn.Module, example: Example, steps_per_epoch: int
) -> tuple[TrainPrepared, torch.optim.lr_scheduler.LRScheduler | None, Numerics]:
    """The backend's train step over the model, its learning-rate schedule, and the float
    math it was prepared under (recorded)."""
    from stackcost.backends import PrepareContext
    from stackcost.backends.torch_common import numerics

    cell = bench.cell
    cfg = cell.train
    assert cfg is not None
    ctx = PrepareContext(workdir=Path(bench.task.workdir))
    optimizer = _OptimizerFactory(cfg, cfg.epochs * steps_per_epoch)
    # On a GPU, fp32 training is IEEE fp32 in every torch rung: torch's default would let
    # cuDNN convolutions round to TF32. Set before the rung traces or compiles; recorded.
    fp32_math = numerics(cell)
    prepared = bench.backend.prepare_train(model, optimizer, cross_entropy, example, cell, ctx)
    return prepared, optimizer.schedule(), fp32_math


@dataclass
class _EpochTotals:
    """One epoch's training steps, summed: times, bytes copied, losses and predictions."""

    wait_ns: int = 0
    copy_ns: int = 0
    step_ns: int = 0
    copy_bytes: int = 0
    losses: list[float] = field(default_factory=list)
    correct: int = 0
    seen: int = 0  # samples
    predicted: int = 0  # predictions made (tokens, for a LM)

    def record(
        self, epoch: int, train_ns: int, complete: bool, cell: Cell, pinned: bool
    ) -> dict[str, Any]:
        """The epoch's training fields of its EpochRecord."""
        steps = len(self.losses)
        return dict(
            epoch=epoch,
            complete=complete,
            steps=steps,
            train_samples=self.seen,
            train_loss=sum(self.losses) / steps,
            train_accuracy=self.correct / self.predicted,
            train_s=train_ns / 1e9,
            loader_wait_s=self.wait_ns / 1e9,
            step_s=self.step_ns / 1e9,
            train_samples_per_s=self.seen / (train_ns / 1e9),
            copy_bytes_per_batch=self.copy_bytes / steps,
            copy_ms_per_batch=self.copy_ns / steps / 1e6,
            copy_device=cell.device,
            copy_pinned=pinned if cell.device == "cuda" else None,
        )


class _Epochs:
    """The epochs over a prepared train step, and what they record across epochs: the
    steps' times, the first losses, the loss divergence is judged against."""

    def __init__(
        self,
        cell: Cell,
        prepared: TrainPrepared,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        train: Batches,
        test: Batches,
    ) -> None:
        import torch

        assert cell.train is not None
        self.cell, self.cfg = cell, cell.train
        self.prepared, self.scheduler = prepared, scheduler
        self.train, self.test = train, test
        self.device = torch.device(cell.device)
        self.cuda = cell.device == "cuda"
        # Pinned: the copy runs asynchronously, straight from the batch's page-locked memory.
        self.pinned = self.cuda and prepared.place is None and not self.cfg.pageable
        self.samples_ns: list[int] = []
        self.first_losses: list[float] = []
        self.cold_ns: int | None = None  # the first step, compile included: its own number
        self.reference: float | None = None  # loss the divergence rule compares against
        self.diverged = ""

    def run(self) -> list[EpochRecord]:
        """Every epoch, each ending with its evaluation; up to the first that diverged."""
        from stackcost.result import EpochRecord

        records: list[EpochRecord] = []
        for epoch in range(1, self.cfg.epochs + 1):
            record, train_ns = self._train_epoch(epoch)
            if self.diverged:
                records.append(EpochRecord(epoch_s=train_ns / 1e9, **record))
                break
            if epoch == 1:
                self.reference = record["train_loss"]
            records.append(self._evaluated(record, train_ns))
        return records

    def _place(self, x: Any, y: Any) -> tuple[Any, Any]:
        """A batch where the step reads it: the backend's placement, else torch's copy."""
        if self.prepared.place is not None:
            return self.prepared.place(x, y)
        device, pinned = self.device, self.pinned
        return x.map(lambda t: t.to(device, non_blocking=pinned)), y.to(device, non_blocking=pinned)

    def _sync(self) -> None:
        """Wait for the GPU, so that each timed part ends when its work does."""
        import torch

        if self.cuda:
            torch.cuda.synchronize()

    def _train_epoch(self, epoch: int) -> tuple[dict[str, Any], int]:
        """One pass over the shuffled training batches, stopped by divergence: its
        EpochRecord's training fields, and its time in ns."""
        import torch

        generator = torch.Generator().manual_seed(self.cfg.data_seed + epoch)
        order = self.train.order(generator)
        totals = _EpochTotals()
        t_epoch = time.perf_counter_ns()
        for i in range(len(self.train)):
            value = self._step(order, i, totals)
            self.diverged = self._divergence(value, epoch, i)
            if self.diverged:
                break
        train_ns = time.perf_counter_ns() - t_epoch
        return totals.record(epoch, train_ns, not self.diverged, self.cell, self.pinned), train_ns

    def _step(self, order: torch.Tensor, i: int, totals: _EpochTotals) -> float:
        """Batch i: loaded, copied and stepped, each timed apart; its loss."""
        clock = time.perf_counter_ns
        t0 = clock()
        x, y = self.train.get(order, i)
        if self.pinned:
            x, y = x.map(lambda t: t.pin_memory()), y.pin_memory()
        t1 = clock()
        placed_x, placed_y = self._place(x, y)
        self._sync()
        t2 = clock()
        loss, out = self.prepared.step(placed_x, placed_y)
        self._sync()
        t3 = clock()
        if self.scheduler is not None:
            self.scheduler.step()
        totals.wait_ns += t1 - t0
        totals.copy_ns += t2 - t1
        totals.step_ns += t3 - t2
        totals.copy_bytes += x.nbytes() + y.nbytes
        if self.cold_ns is None:
            self.cold_ns = t3 - t2
        else:
            self.samples_ns.append(t3 - t2)
        value = float(loss)
        totals.losses.append(value)
        if len(self.first_losses) < FIRST_LOSSES:
            self.first_losses.append(value)
        # Torch levels' labels are already on the logits' device; others' stay torch.
        totals.correct += _correct(out, y if self.prepared.place else placed_y)
        totals.seen += len(y)
        totals.predicted += y.numel()
        return value

    def _divergence(self, value: float, epoch: int, i: int) -> str:
        """Why the loss of step i has diverged, or "": not finite, or DIVERGENCE_FACTOR
        times the reference (the first step's, then the first epoch's mean)."""
        if self.reference is None:
            self.reference = value
        if not math.isfinite(value):
            return f"loss {value} at epoch {epoch} step {i + 1}"
        if value > DIVERGENCE_FACTOR * self.reference:
            return (
                f"loss {value:.3g} > {DIVERGENCE_FACTOR:g} x {self.reference:.3g} "
                f"at epoch {epoch} step {i + 1}"
            )
        return ""

    def _evaluated(self, record: dict[str, Any], train_ns: int) -> EpochRecord:
        """The epoch's record, with its evaluation pass over the held-out batches."""
        from stackcost.result import EpochRecord

        t_eval = time.perf_counter_ns()
        eval_correct, eval_loss = 0, 0.0
        eval_order = self.test.order(None)
        for i in range(len(self.test)):
            x, y = self.test.get(eval_order, i)
            logits = self.prepared.evaluate(self._place(x, y)[0])
            y = y.to(logits.device)
            eval_loss += float(cross_entropy(logits, y, reduction="sum").item())
            eval_correct += int((logits.argmax(-1) == y).sum().item())
        eval_ns = time.perf_counter_ns() - t_eval
        n_eval = len(self.test.labels)
        scored = self.test.labels.numel()  # per sample, or per token for a LM
        return EpochRecord(
            epoch_s=(train_ns + eval_ns) / 1e9,
            eval_accuracy=eval_correct / scored if n_eval else None,
            eval_loss=eval_loss / scored if n_eval else None,
            eval_samples=n_eval,
            eval_s=eval_ns / 1e9,
            eval_samples_per_s=n_eval / (eval_ns / 1e9) if n_eval else None,
            **record,
        )
