"""The grid's axes beside the batch and the model's own sizes (precision, threads, device),
declared once, as data.

Each row says what the cell field, the store and table column, the spec's (and YAML's) key,
the command-line flag, the allowed values and a report's label of the axis are; the cell,
the spec validators, the flags, the store's columns and the report's lists read them from
here. Adding a precision is one entry in PRECISION_TOLERANCE (a quantized one, a rule in
QUANTIZED too). Imports nothing of stackcost:
the cell itself reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuantRule:
    """What a quantized cell must keep of eager fp32's answer to be `ok` rather than `wrong`:
    a quantized output is judged by what it decides, not by the fp32 tolerance.

    - Every cell: the max relative error within the precision's tolerance (a scale blown up
      tenfold keeps every argmax but not the error), and `max_kl`, the mean KL(fp32 ||
      quantized) of the softmax over the last axis, in nats.
    - Trained weights on held-out data (digits): top-1 agreement with fp32's predictions of
      at least `min_top1`, and accuracy at most `max_accuracy_drop` points below fp32's.
      On seeded random weights top-1 agreement is reported, not judged: their logits are
      near ties (mnist-cnn's median top-1/top-2 gap is 3% of the logit spread), so a flip
      measures the tie, not the quantization."""

    what: str  # what is int8/int4, in words
    min_top1: float
    max_kl: float
    max_accuracy_drop: float = 1.0
    # A trained decoder on held-out text (stackcost heldout on stdlib-text): perplexity at
    # most this many percent above eager fp32's. From llama.cpp's own CI on OpenLLaMA 3B v2
    # (WikiText-2, ggml-org/ci, 2023-07-21): Q8_0 +0.46%, Q4_0 +5.2%, Q4_K +6.2% over f16.
    # A smaller model loses more to the same rounding, so each bound is about twice the
    # 3B's worst loss at that width. KL and same-top are reported, not judged.
    max_ppl_increase_pct: float | None = None

    def text(self, tolerance: float) -> str:
        return (
            f"max rel err <= {tolerance:g}, KL <= {self.max_kl:g} nats; held out: "
            f"top-1 agreement >= {self.min_top1:.0%}, accuracy drop <= "
            f"{self.max_accuracy_drop:g} pt"
        )


# Every precision a cell can ask for, with the relative output tolerance it is verified to
# against eager fp32 (max|out - ref| / max|ref|): bf16 keeps 8 mantissa bits, fp16 11. A
# quantized precision's tolerance is loose (int8 rounds every weight to 1/255 of its range)
# and its rule below decides with it.
# - tf32 (CUDA only): fp32 model and inputs, matmuls and convolutions on tensor cores with
#   operands rounded to 10 explicit mantissa bits, fp16's, accumulated in fp32; so fp16's
#   1e-2, with room if resnet50's tf32 error is the ~1e-3 of the max usually reported (not
#   yet measured here: no GPU run has verified a tf32 cell).
# - amp: fp32 model and inputs, each call under torch.autocast: float16 on CUDA, bfloat16
#   on the CPU. One precision has one tolerance, so it takes the looser of the two, bf16's.
PRECISION_TOLERANCE: dict[str, float] = {
    "fp32": 1e-4,
    "tf32": 1e-2,
    "bf16": 5e-2,
    "fp16": 1e-2,
    "amp": 5e-2,
    "int8-dyn": 0.15,
    "int8": 0.15,
    "w8": 0.15,
    "w4": 0.35,
}

# The precisions that exist only on a GPU, each with the reason a cell elsewhere is refused
# for (read in the parent, before any worker starts, beside QUANTIZED's CPU-only rule).
CUDA_ONLY: dict[str, str] = {
    "tf32": "tf32 is a CUDA tensor-core math mode; on cpu use fp32 or bf16",
}

# The quantized precisions and their acceptance rules: each rung builds them with its own
# framework's tooling (stackcost.quantize).
QUANTIZED: dict[str, QuantRule] = {
    "int8-dyn": QuantRule("int8 weights, activations quantized per call", 0.99, 0.02),
    "int8": QuantRule("int8 weights, activations with calibrated static scales", 0.99, 0.02),
    "w8": QuantRule("int8 weights only, activations stay float", 0.99, 0.01, 1.0, 1.0),
    "w4": QuantRule("int4 weights only, in groups, activations stay float", 0.97, 0.10, 2.0, 12.0),
}


@dataclass(frozen=True)
class GridAxis:
    """One axis of the grid: its names everywhere, what it allows, how a report shows it."""

    name: str  # the Cell field, store and table column, and refusal wording: "precision"
    plural: str  # the RunSpec field and YAML key: "precisions"
    values: tuple[str, ...] | None  # the allowed values; None: a positive count (threads)
    default: str | None  # a choice axis' default; a count's is the machine's (cores)
    label: str  # a report's name for one value, a format: "{} thr"
    tag: str  # the one-line cell label's, a format: "t{}"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def help(self) -> str:
        """The flag's help, from its values."""
        return f"comma list of {', '.join(self.values or ())}"


GRID_AXES: dict[str, GridAxis] = {
    a.name: a
    for a in (
        GridAxis("precision", "precisions", tuple(PRECISION_TOLERANCE), "fp32", "{}", "{}"),
        GridAxis("threads", "threads", None, None, "{} thr", "t{}"),
        GridAxis("device", "devices", ("cpu", "cuda"), "cpu", "{}", "{}"),
    )
}
# In the cell's, the store's and the tables' order.
GRID_COLUMNS: tuple[str, ...] = tuple(GRID_AXES)
# The choice axes (a list of allowed values) and the count axes (positive integers).
CHOICE_AXES: tuple[GridAxis, ...] = tuple(a for a in GRID_AXES.values() if a.values)
COUNT_AXES: tuple[GridAxis, ...] = tuple(a for a in GRID_AXES.values() if not a.values)

PRECISIONS: tuple[str, ...] = GRID_AXES["precision"].values or ()
DEVICES: tuple[str, ...] = GRID_AXES["device"].values or ()
