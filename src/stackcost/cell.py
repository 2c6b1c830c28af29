"""The unit of measurement: a cell is workload x backend x device x threads.

These types are plain data (pydantic) so they cross process boundaries as JSON,
are stored verbatim, and can be hashed into a stable key for resume and compare.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["infer", "train"]
Precision = Literal["fp32", "bf16", "fp16"]
Device = Literal["cpu", "cuda"]

MODES: tuple[str, ...] = ("infer", "train")
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
DEVICES: tuple[str, ...] = ("cpu", "cuda")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ModelRef(Frozen):
    """Which network and how it is built: everything that determines its weights."""

    name: str  # a zoo name ("resnet50") or a "package.module:factory" path
    num_classes: int = 1000
    in_channels: int = 3
    conv_bias: bool = False
    init: str = "torch-default"
    # Per-sample input shape for a user factory (e.g. (3, 224, 224)); None for zoo models,
    # whose shape follows from in_channels and the cell's resolution.
    input_shape: tuple[int, ...] | None = None
    seed: int = 0

    @property
    def is_factory(self) -> bool:
        return ":" in self.name


class TrainConfig(Frozen):
    """What a training cell learns from and how: part of the cell's identity.

    The data directory is not: it says where the files are, not what they are.
    """

    dataset: str = "digits"
    epochs: int = 5
    lr: float = 0.05
    optimizer: Literal["sgd", "adam"] = "sgd"
    momentum: float = 0.9
    # cosine: the learning rate decays to 0 over all steps, so the final epoch's accuracy
    # is not at the mercy of the last large step (BatchNorm's running stats lag it).
    schedule: Literal["cosine", "constant"] = "cosine"
    limit: int | None = None  # first N samples of each split (small runs)
    data_seed: int = 0  # shuffling: epoch e uses torch.Generator().manual_seed(data_seed + e)


class Cell(Frozen):
    model: ModelRef
    backend: str
    mode: Mode = "infer"
    batch_size: int = 1
    resolution: int = 224
    precision: Precision = "fp32"
    threads: int = 1
    device: Device = "cpu"
    # Backend knobs the user set (e.g. {"variant": "script"}); the defaults a backend
    # actually used are recorded with each repetition's details instead.
    backend_options: dict[str, str] = Field(default_factory=dict)
    # Set for mode "train" only; left out of the key when None so inference keys stay stable.
    train: TrainConfig | None = None

    def key(self) -> str:
        """A stable digest of everything that defines the cell."""
        data = self.model_dump(mode="json")
        if self.train is None:
            del data["train"]
        blob = json.dumps(data, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        return (
            f"{self.model.name} {self.backend} {self.mode} b{self.batch_size} "
            f"r{self.resolution} {self.precision} t{self.threads} {self.device}"
        )

    def input_shape(self) -> tuple[int, ...]:
        """Shape of the batched input tensor."""
        if self.model.input_shape is not None:
            return (self.batch_size, *self.model.input_shape)
        return (self.batch_size, self.model.in_channels, self.resolution, self.resolution)

    def flat(self) -> dict[str, Any]:
        """Columns for tables and DataFrames."""
        return {
            "model": self.model.name,
            "backend": self.backend,
            "mode": self.mode,
            "batch_size": self.batch_size,
            "resolution": self.resolution,
            "precision": self.precision,
            "threads": self.threads,
            "device": self.device,
            "init": self.model.init,
        }
