"""What a training run is asked to do, as plain values: `TrainingRequest`.

`stackcost train` reads its flags into one; a Python user builds one with keywords or
calls `stackcost.api.training.train`. The defaults here are the command's. Nothing here
asks the model anything: `stackcost.api.training.prepare_training` checks the request
against the model and its data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stackcost.axes import DEVICES
from stackcost.cell import TrainConfig
from stackcost.errors import SpecError
from stackcost.runspec.grammar import MAX_REPEATS, check_env_names, check_int
from stackcost.runspec.run import check_threads
from stackcost.runspec.train import DEFAULT_BACKENDS, TrainSpec
from stackcost.workload import SIZE_AXES

OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
SCHEDULES: tuple[str, ...] = ("cosine", "constant")  # of the learning rate, over all steps

_CONFIG = TrainConfig()  # a training cell's defaults: the request's
_SPEC = TrainSpec.model_fields


@dataclass(frozen=True)
class TrainingRequest:
    """One model trained on one dataset through each of `backends`, from the same
    initial weights: what `stackcost train` takes as flags, as typed values.

    `dataset` None: digits for a model fed images, stdlib-text for a causal LM, else
    synthetic. `sizes` (e.g. {"resolution": 32}, {"seq_len": 128}): any size axis of the
    model; the ones left out take the model's default (for an image model, the smallest
    resolution that holds the dataset's images). `num_classes` None: the dataset's, else
    the model's own head. `config` and `head`: a Hugging Face model's overrides and head
    (classification unless the data is text). `threads` None: every CPU this process may
    use. `limit`: the first N samples of each split. `inherit_env`: environment variables
    passed to the workers (recorded with the run).
    """

    model: str
    backends: Sequence[str] = DEFAULT_BACKENDS
    dataset: str | None = None
    data_dir: str | None = None
    epochs: int = _CONFIG.epochs
    batch_size: int = _SPEC["batch_size"].default
    lr: float = _CONFIG.lr
    optimizer: str = _CONFIG.optimizer
    momentum: float = _CONFIG.momentum
    schedule: str = _CONFIG.schedule
    pageable: bool = False  # on a GPU: copy each batch from pageable host memory, not pinned
    init: str = "torch-default"
    sizes: Mapping[str, int] = field(default_factory=dict)
    num_classes: int | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    head: str | None = None
    threads: Sequence[int] | None = None
    devices: Sequence[str] = ("cpu",)
    limit: int | None = None
    seed: int = 0  # weights, RNGs and shuffling
    repeats: int = _SPEC["repeats"].default
    timeout_s: float = _SPEC["timeout_s"].default  # per repetition
    inherit_env: Sequence[str] = ()


def check_request(request: TrainingRequest) -> None:
    """Refuse what no model could train with (counts, numbers, names): SpecError, before
    the model is asked anything. The command's flags reach here parsed, so its own
    messages have already named a bad value as it was typed."""
    for axis in request.sizes:
        if axis not in SIZE_AXES:
            raise SpecError(f"unknown size axis {axis!r} (allowed: {', '.join(SIZE_AXES)})")
    for what, value in (
        ("epochs", request.epochs),
        ("batch size", request.batch_size),
        ("limit", request.limit),
        ("repeats", request.repeats),
        ("num-classes", request.num_classes),
        *((name.replace("_", " "), v) for name, v in request.sizes.items()),
        *(("threads", n) for n in request.threads or ()),
    ):
        if value is not None and check_int(value, what) <= 0:
            raise SpecError(f"{what} {value} must be a positive integer (>= 1)")
    if request.repeats > MAX_REPEATS:  # the wording `run` gives (runspec.run.validate)
        raise SpecError(
            f"repeats = {request.repeats}: Input should be less than or equal to {MAX_REPEATS}"
        )
    if not (math.isfinite(request.lr) and request.lr > 0):
        raise SpecError(f"learning rate {request.lr!r} must be a positive number")
    if request.optimizer not in OPTIMIZERS:
        raise SpecError(
            f"unknown optimizer {request.optimizer!r} (allowed: {', '.join(OPTIMIZERS)})"
        )
    if request.schedule not in SCHEDULES:
        raise SpecError(f"unknown schedule {request.schedule!r} (allowed: {', '.join(SCHEDULES)})")
    if not (math.isfinite(request.momentum) and request.momentum >= 0):
        raise SpecError(f"momentum {request.momentum!r} must be a finite number, at least 0")
    if not (math.isfinite(request.timeout_s) and request.timeout_s > 0):
        raise SpecError(f"timeout {request.timeout_s!r} must be a finite number greater than 0")
    if check_int(request.seed, "seed") < 0:
        raise SpecError(f"seed {request.seed} must be 0 or more")
    check_threads(list(request.threads or ()))
    _check_devices(request)
    problem = check_env_names(request.inherit_env)
    if problem:
        raise SpecError(problem)


def _check_devices(request: TrainingRequest) -> None:
    """One device at least, each a known one; --pageable only where a GPU copies batches."""
    if not request.devices:
        raise SpecError(f"no device given: give one or more of {', '.join(DEVICES)}")
    for device in request.devices:
        if device not in DEVICES:
            raise SpecError(f"unknown device {device!r} (allowed: {', '.join(DEVICES)})")
    if request.pageable and "cuda" not in request.devices:
        raise SpecError("--pageable is about the copy to a GPU: add --device cuda")
