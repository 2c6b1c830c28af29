"""The family of cells issue 62 calibrates on, one table for every benchmark that uses it.

Convolutions, matrix multiplies and attention; activations below, around and above one
core's L2; 1 and 2 threads; eager, inductor, onnxruntime and openvino. A member is one
`stackcost run` (its backends are its cells): 8 cells in all. Every model has a slowdown
knob (knob_model.py), so each member can be gated and bisected as well as timed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    what: str
    model: str  # a zoo name, or module:factory (benchmarks/ on PYTHONPATH)
    batch_size: int
    threads: int
    backends: tuple[str, ...] = ("eager",)
    input_shape: str | None = None  # a factory's sample shape
    resolution: int | None = None  # px, where the model has that axis

    def model_args(self) -> list[str]:
        """The model's flags, as `stackcost run` takes them."""
        if self.input_shape:
            return ["--model", self.model, "--input-shape", self.input_shape]
        return [self.model, *(["--resolution", str(self.resolution)] if self.resolution else [])]

    def run_args(self) -> list[str]:
        """Every flag of its `stackcost run` but the measurement's own."""
        return [
            *self.model_args(),
            "--batch-size", str(self.batch_size),
            "--threads", str(self.threads),
            "--backends", ",".join(self.backends),
        ]  # fmt: skip


CONV = "knob_model:convstack"
FAMILY = [
    Member(
        "conv 3x3 stack, 3.2 MB activations, 4 rungs",
        CONV,
        8,
        2,
        ("eager", "inductor", "onnxruntime", "openvino"),
        input_shape="3,56,56",
    ),  # fmt: skip
    Member("conv 3x3 stack, 12.8 MB activations", CONV, 32, 1, input_shape="3,56,56"),
    Member(
        "matmul: 20 Linear 256, 32 KB activations", "knob_model:model", 32, 1, input_shape="256"
    ),
    Member(
        "attention: 20 encoder layers, 64 tokens of 128",
        "knob_model:attention",
        8,
        2,
        input_shape="64,128",
    ),  # fmt: skip
    Member("conv: ResNet-18 at 64 px", "knob_model:resnet18", 8, 2, input_shape="3,64,64"),
]
