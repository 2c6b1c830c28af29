"""Quantized precisions (axes.QUANTIZED), built by each rung's own framework's tooling:
torchao for the PyTorch rungs, onnxruntime.quantization for ONNX Runtime, NNCF for
OpenVINO. Nothing here quantizes by hand; each module turns a precision into that tool's
recipe and records what the tool actually built (`QuantRecord`), counted from the built
graph or model, never assumed.

A static precision (int8) calibrates on `Calibration`: inputs drawn like the measured ones
but from other seeds, so the measured inputs never set their own scales.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from stackcost.axes import QUANTIZED

if TYPE_CHECKING:
    from stackcost.workload import Example, ModelFields, Workload

# Calibration samples for a static precision, in batches of the cell's size (a graph exported
# for one batch size takes only that): enough for the observers to settle on these synthetic
# sets, few enough that calibration stays seconds.
CALIBRATION_SAMPLES = 32
# Seeds of calibration batches start here, far from the measured inputs' (model seed + 1).
CALIBRATION_SEED = 10_000


def is_quantized(precision: str) -> bool:
    return precision in QUANTIZED


@contextmanager
def quiet(*loggers: str) -> Iterator[None]:
    """A quantization tool's warnings and its `loggers` ("" is the root) below ERROR, for
    one call: deprecations and missing CUDA extensions are no news for a CPU run. A
    root-logger call in a process without handlers installs one: it is taken back too."""
    named = [logging.getLogger(name or None) for name in loggers]
    levels = [logger.level for logger in named]
    handlers = list(logging.getLogger().handlers)
    for logger in named:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(named, levels, strict=True):
            logger.setLevel(level)
        root = logging.getLogger()
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)


class Ops(BaseModel):
    """Weighted (and matmul-like) ops of the built graph or model, by kind, counted."""

    model_config = ConfigDict(frozen=True)
    quantized: dict[str, int] = Field(default_factory=dict)
    float: dict[str, int] = Field(default_factory=dict)


class QuantRecord(BaseModel):
    """What a rung actually built for a quantized precision: recorded with every repetition
    (details["quantization"])."""

    model_config = ConfigDict(frozen=True)
    precision: str
    tool: str  # "torchao 0.18.0 pt2e X86InductorQuantizer", "onnxruntime 1.32.0 quantize_static"
    weights: str  # "int8 symmetric per-channel", "int4 asymmetric, groups of 32"
    activations: str  # "float", "uint8 asymmetric per-tensor, dynamic (per call)", ...
    group_size: int | None = None
    calibration: dict[str, Any] | None = None  # Calibration.record(); None: not calibrated
    ops: Ops
    weight_bytes: int  # the quantized weights as the rung stores them
    fp32_weight_bytes: int  # the same weights in fp32
    # How the build was fitted to the CPU's int8 dot product, and why ("u8u8", "auto: this
    # CPU has no VNNI ..."); None where the tool has no such choice.
    scheme: str | None = None
    scheme_reason: str | None = None
    notes: list[str] = Field(default_factory=list)  # fallbacks, deprecations, caveats

    def details(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class Calibration:
    """The inputs a static quantization sets its activation scales on."""

    examples: list[Example]
    source: str  # in words: where the inputs come from

    def record(self) -> dict[str, Any]:
        batch = int(self.examples[0].tensors[0].shape[0]) if self.examples else 0
        return {
            "set": self.source,
            "batches": len(self.examples),
            "samples": batch * len(self.examples),
        }


def calibration_set(
    workload: Workload,
    ref: ModelFields,
    batch: int,
    sizes: dict[str, int],
    samples: int = CALIBRATION_SAMPLES,
) -> Calibration:
    """At least `samples` synthetic inputs in batches of `batch`, drawn as the measured ones
    are (same shapes, same distributions) from seeds CALIBRATION_SEED.. of their own."""
    from stackcost.workload import make_example

    batches = -(-samples // batch)

    examples = [
        make_example(workload, ref, batch, sizes, seed=CALIBRATION_SEED + i) for i in range(batches)
    ]
    return Calibration(
        examples,
        f"synthetic: drawn like the measured inputs, seeds {CALIBRATION_SEED}.."
        f"{CALIBRATION_SEED + batches - 1}",
    )
