"""Eager training as the reference the native programs' losses must match.

A tiny problem (random images and labels), the files the program trains from
(stackcost.native.training), and the same steps in eager PyTorch: SGD with momentum on
mean cross-entropy, the Python worker's order of operations and its cosine schedule.
"""

from __future__ import annotations

import copy
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from stackcost import zoo
from stackcost.cell import Cell, ModelRef, TrainConfig
from stackcost.native.training import epoch_orders, train_args, write_train_files


@dataclass
class Problem:
    cell: Cell
    model: torch.nn.Module  # initial weights, train mode
    train: tuple[torch.Tensor, torch.Tensor]
    test: tuple[torch.Tensor, torch.Tensor]
    orders: torch.Tensor


def problem(
    arch: str = "resnet18",
    resolution: int = 32,
    n: int = 48,
    n_test: int = 20,
    batch: int = 8,
    epochs: int = 2,
    classes: int = 10,
    channels: int = 3,
    lr: float = 0.05,
    momentum: float = 0.9,
    schedule: str = "cosine",
    seed: int = 0,
    optimizer: str = "sgd",
) -> Problem:
    ref = ModelRef(name=arch, num_classes=classes, in_channels=channels, seed=seed)
    cfg = TrainConfig(epochs=epochs, lr=lr, momentum=momentum, schedule=schedule,  # type: ignore[arg-type]
                      optimizer=optimizer)  # type: ignore[arg-type]  # fmt: skip
    cell = Cell(model=ref, backend="eager", mode="train", batch_size=batch,
                resolution=resolution, threads=1, train=cfg)  # fmt: skip
    g = torch.Generator().manual_seed(seed + 100)
    shape = (channels, resolution, resolution)
    images = torch.rand(n + n_test, *shape, generator=g)
    labels = torch.randint(0, classes, (n + n_test,), generator=g)
    return Problem(
        cell=cell,
        model=zoo.build_model(ref, resolution).train(),
        train=(images[:n], labels[:n]),
        test=(images[n:], labels[n:]),
        orders=epoch_orders(n, epochs, cfg.data_seed),
    )


def eager_losses(
    p: Problem, max_steps: int = 0, snapshots: list[dict[str, torch.Tensor]] | None = None
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Per-step losses and the final state_dict, trained exactly as the Python worker does;
    a copy of the state_dict after each step appended to `snapshots` when given (the state a
    run of max_steps=k would end in is snapshots[k - 1])."""
    model = copy.deepcopy(p.model).train()
    cfg = p.cell.train
    assert cfg is not None
    opt = (
        torch.optim.Adam(model.parameters(), lr=cfg.lr)  # torch's defaults, as the worker
        if cfg.optimizer == "adam"
        else torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    )
    images, labels = p.train
    batch = p.cell.batch_size
    steps_per_epoch = len(labels) // batch
    sched = (
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(cfg.epochs * steps_per_epoch, 1))
        if cfg.schedule == "cosine"
        else None
    )
    losses: list[float] = []
    for epoch in range(cfg.epochs):
        order = p.orders[epoch]
        for i in range(steps_per_epoch):
            idx = order[i * batch : (i + 1) * batch]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(images[idx]), labels[idx])
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            losses.append(float(loss.detach()))
            if snapshots is not None:
                snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            if max_steps and len(losses) >= max_steps:
                return losses, model.state_dict()
    return losses, model.state_dict()


def run_program(
    executable: Path, p: Problem, workdir: Path, max_steps: int = 0, **extra: Any
) -> dict[str, Any]:
    """Write the problem's files, run `<program> train`, return its JSON answer."""
    files = write_train_files(workdir, p.model.state_dict(), p.train, p.test, p.orders)
    args = {**train_args(p.cell, files, max_steps=max_steps), **extra}
    cmd = [str(executable), "train", *(f"{k}={v}" for k, v in args.items())]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{executable.name} exit {out.returncode}: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])
