"""What every training level records the same way, in-process or in a C++ program."""

from __future__ import annotations

import os
from typing import Any

from stackcost.result import RepetitionResult
from stackcost.train.task import TrainTask


def run_details(task: TrainTask, splits: dict[str, Any]) -> dict[str, Any]:
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
        },
    }


def stochastic_layers(model: Any) -> list[str]:
    """The model's layers that draw random masks in training (dropout with p > 0): each
    framework draws its own, so their losses are not compared across levels."""
    import torch

    kinds = (torch.nn.modules.dropout._DropoutNd,)
    return sorted({type(m).__name__ for m in model.modules() if isinstance(m, kinds) and m.p > 0})


def set_step_stats(result: RepetitionResult, samples_ns: list[int], batch: int) -> None:
    """Per-step times, for the same stats and throughput machinery inference uses."""
    from stackcost.measure.stats import summarize

    result.samples_ns = samples_ns
    if samples_ns:
        result.stats = summarize(samples_ns)
        result.throughput = batch / (result.stats.median_ms / 1e3)
