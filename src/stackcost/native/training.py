"""Training below Python: the files a native program trains from, and its answer back.

The program runs the whole loop itself (`<program> train key=value ...`, see
native/README.md "Training"), so no Python sits between its steps. Python decides
everything that must match the eager level exactly and writes it down: the initial
weights, the images already scaled to float, and each epoch's shuffled order (the same
`torch.randperm` the train scenario draws). The program answers with per-step times and
losses and per-epoch counts, which the backend turns into the engine's records
(backends/native.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.native import network_args
from stackcost.native.tensors import write_tensors

if TYPE_CHECKING:
    import numpy as np
    import torch

    from stackcost.cell import Cell


def epoch_orders(n: int, epochs: int, data_seed: int) -> torch.Tensor:
    """Row e-1 is epoch e's order: the permutation the Python worker draws for that epoch."""
    import torch

    return torch.stack(
        [
            torch.randperm(n, generator=torch.Generator().manual_seed(data_seed + epoch))
            for epoch in range(1, epochs + 1)
        ]
    )


def as_float_images(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Images as the Python loader hands them to a step: uint8 scaled by 1/255."""
    import torch

    x = torch.as_tensor(images)
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()


def write_train_files(
    workdir: Path,
    state: Mapping[str, torch.Tensor],
    train: tuple[Any, Any],
    test: tuple[Any, Any],
    orders: torch.Tensor,
) -> dict[str, Path]:
    """Write weights.scw, train.scw (images, labels, order) and test.scw (images, labels).

    Labels and orders are stored as float32 like every SCW1 tensor: exact below 2**24.
    """
    import torch

    workdir = Path(workdir)
    files = {name: workdir / f"{name}.scw" for name in ("weights", "train_data", "test_data")}
    write_tensors(files["weights"], state)
    for key, (images, labels), extra in (
        ("train_data", train, {"order": orders}),
        ("test_data", test, {}),
    ):
        write_tensors(
            files[key],
            {
                "images": as_float_images(images),
                "labels": torch.as_tensor(labels).float(),
                **extra,
            },
        )
    return files


def train_args(
    cell: Cell, files: Mapping[str, Path], max_steps: int = 0, divergence_factor: float = 1e3
) -> dict[str, Any]:
    """The program's key=values for a train cell (see native/README.md "Training")."""
    cfg = cell.train
    if cfg is None:
        raise ValueError("a native training run needs a cell with a train config")
    return {
        **network_args(cell),
        "threads": cell.threads,
        **files,
        "batch": cell.batch_size,
        "epochs": cfg.epochs,
        "optimizer": cfg.optimizer,
        "lr": repr(cfg.lr),
        "momentum": repr(cfg.momentum),
        "schedule": cfg.schedule,
        "max_steps": max_steps,
        "divergence_factor": repr(divergence_factor),
    }
