"""A validated description of a training run, expanded into mode="train" cells.

Everything is checked here, before a store exists: one-line SpecError messages, exit 2.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stackcost.backends import BASELINE, REGISTRY, check_name
from stackcost.cell import Cell, ModelRef, TrainConfig
from stackcost.errors import SpecError
from stackcost.runspec.grammar import MAX_REPEATS
from stackcost.workload import Workload

if TYPE_CHECKING:
    from stackcost.backends.base import BackendFacts

DEFAULT_BACKENDS = (BASELINE, "inductor", "torchscript")


class TrainSpec(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    model: ModelRef
    backends: list[str] = Field(default_factory=lambda: list(DEFAULT_BACKENDS))
    train: TrainConfig = Field(default_factory=TrainConfig)
    batch_size: int = Field(64, ge=1)
    sizes: dict[str, int]  # the model's size axes: {"resolution": 32}, {"seq_len": 128}
    threads: list[int] = Field(default_factory=lambda: [1])
    devices: list[str] = Field(default_factory=lambda: ["cpu"])
    repeats: int = Field(1, ge=1, le=MAX_REPEATS)
    timeout_s: float = Field(1800.0, gt=0)
    data_dir: str | None = None  # where the files are; not part of any cell's identity
    backend_options: dict[str, dict[str, str]] = Field(default_factory=dict)
    # Variables passed to workers beyond the whitelist (execute/environ.py); recorded.
    inherit_env: list[str] = Field(default_factory=list)

    # What execute.plan.Plan asks of a spec: training has no batch search.
    find_max_batch: ClassVar[bool] = False
    max_batch: ClassVar[int] = 0

    @model_validator(mode="before")
    @classmethod
    def _older_spellings(cls, data: Any) -> Any:
        """`resolution=` (the spelling before size axes were general) is the image axis;
        `device=` (before a training run took several) is a list of one."""
        if isinstance(data, dict) and ("resolution" in data or "device" in data):
            data = dict(data)
            if "resolution" in data:
                data["sizes"] = {"resolution": data.pop("resolution")}
            if "device" in data:
                data["devices"] = [data.pop("device")]
        return data

    def digest(self) -> str:
        return hashlib.sha1(self.model_dump_json().encode()).hexdigest()[:16]

    def cells(self) -> list[Cell]:
        return [
            Cell(
                model=self.model,
                backend=backend,
                mode="train",
                batch_size=self.batch_size,
                sizes=self.sizes,
                threads=threads,
                device=device,  # type: ignore[arg-type]
                backend_options=self.backend_options.get(backend, {}),
                train=self.train,
            )
            for device in self.devices
            for threads in self.threads
            for backend in self.backends
        ]


def default_resolution(workload: Workload, native: int | None) -> int:
    """The smallest input the model accepts that still holds the dataset's images."""
    minimum = workload.minimum.get("resolution", 1)
    return max(native or minimum, minimum)


def check_learning_rate(text: str) -> float:
    try:
        lr = float(text)
    except ValueError:
        raise SpecError(f"learning rate {text!r} is not a number") from None
    if not math.isfinite(lr) or lr <= 0:
        raise SpecError(f"learning rate {text!r} must be a positive number")
    return lr


def check_data(dataset: str, data_dir: str | None) -> None:
    """Unknown dataset or missing files: SpecError, without reading more than one sample."""
    from stackcost.data import DATASETS, DatasetCorrupt, DatasetMissing, load_dataset, stdlib_text

    if dataset not in DATASETS:
        raise SpecError(f"unknown dataset {dataset!r} (allowed: {', '.join(DATASETS)})")
    try:
        if DATASETS[dataset].fed == "text":
            stdlib_text.corpus()  # this Python's library sources are there
        else:
            load_dataset(dataset, "train", data_dir, limit=1)
    except (DatasetMissing, DatasetCorrupt) as exc:
        raise SpecError(str(exc).splitlines()[0]) from None


def trainable() -> list[str]:
    """The registered backends that train (their classes import no framework)."""
    from stackcost.backends import load_backend

    return [name for name in REGISTRY if "train" in load_backend(name).capabilities.modes]


def check_backend_names(backends: list[str]) -> None:
    """At least one backend, each a known name or an import path; nothing imported."""
    if not backends:
        raise SpecError("no backend given (e.g. --backends eager,inductor,torchscript)")
    for name in backends:
        check_name(name)


def check_backends(
    backends: list[str], facts: Mapping[str, BackendFacts], mode: str = "train"
) -> None:
    """Unknown backends are bad input; so is a request where no backend can train.

    `facts`: the backends' facts, asked by the caller where the run starts (`stackcost
    train` asks once, with its model: execute.probe.ask); a spec never spawns the probe."""
    check_backend_names(backends)
    trainers = [name for name in backends if mode in facts[name].modes]
    if not trainers:
        only = backends[0] if len(backends) == 1 else ", ".join(backends)
        raise SpecError(
            f"cannot train: {only} {'is' if len(backends) == 1 else 'are'} inference only "
            f"(trainable: {', '.join(trainable())})"
        )
