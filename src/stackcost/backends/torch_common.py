"""Small helpers shared by the backends that run torch modules."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stackcost.backends.base import FLAG, Option
from stackcost.quantize.pytorch import REDUCE_RANGE

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import PrepareContext
    from stackcost.cell import Cell
    from stackcost.workload import Example

TrainStep = Callable[[Any, Any], tuple[Any, Any]]

# The compiled rungs' `-o RUNG.reduce_range` for PT2E int8 (quantize.pytorch.reduce_range).
REDUCE_OPTION = Option("auto", REDUCE_RANGE, "7-bit activations for PT2E int8")
# Inductor's (and AOTInductor's) `-o RUNG.layout_optimization`: it converts a conv net's
# activations to channels-last (torch's default, so ours). On a 2-vCPU Xeon with AMX, fp32
# resnet18 at 64 px, that made Inductor 0.63x eager at b8 and 1.13x with it off (docs/
# results/resnet50-fp32.md, "Inductor's layout optimization").
LAYOUT_OPTION = Option("true", FLAG, "channels-last activations for conv nets")

# amp's lower dtype per device: classic mixed precision (float16, with fp32 weights) on
# CUDA; on the CPU, bfloat16, the dtype CPU autocast is built for.
AUTOCAST_DTYPE: dict[str, str] = {"cuda": "float16", "cpu": "bfloat16"}


def torch_dtype(precision: str) -> torch.dtype:
    """The float dtype a cell's model and inputs take. tf32 and amp keep them in fp32 (the
    precision is in the math, see Numerics); a quantized precision's model is quantized
    from fp32 (stackcost.quantize), so it starts in fp32 too."""
    import torch

    floats = {"bf16": torch.bfloat16, "fp16": torch.float16}
    return floats.get(precision, torch.float32)


@dataclass(frozen=True)
class Numerics:
    """How a cell's precision runs beyond its dtype.

    - `fp32_math`, on CUDA only: whether cuBLAS matmuls and cuDNN convolutions may round
      fp32 operands to TF32 on tensor cores. "tf32" for a tf32 cell, "ieee" for every
      other: torch lets cuDNN convolutions use TF32 by default, so an fp32 cell that
      kept the defaults would not be fp32. The flags are this process's (one repetition,
      one process) and are read back into the record.
    - `autocast_dtype`, amp only: each call runs under torch.autocast in that dtype, the
      model and inputs staying fp32.
    """

    device: str
    fp32_math: str | None  # "ieee" or "tf32" on cuda; None elsewhere (the flags are CUDA's)
    autocast_dtype: str | None  # amp's AUTOCAST_DTYPE; None for any other precision

    def apply(self) -> None:
        """Set this process's CUDA fp32 math flags (nothing off CUDA); idempotent.

        torch keeps a legacy TF32 state (allow_tf32, the float32 matmul precision) beside
        the per-op `fp32_precision` flags, and its legacy getters raise when the two
        disagree; torch.export and Inductor still read them (cudnn.conv set to "ieee"
        alone makes torch.export raise). So the legacy setters, which set both, go first,
        and the per-op flags then name the precision of matmuls, convolutions and RNNs."""
        if self.fp32_math is None:
            return
        import torch

        tf32 = self.fp32_math == "tf32"
        with warnings.catch_warnings():  # torch 2.9-2.11 warn that the legacy API will go
            warnings.filterwarnings("ignore", message=".*new API settings to control TF32")
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.fp32_precision = self.fp32_math
        torch.backends.cudnn.conv.fp32_precision = self.fp32_math
        torch.backends.cudnn.rnn.fp32_precision = self.fp32_math

    def call(self) -> contextlib.AbstractContextManager[Any]:
        """What each call of the step runs under: torch.autocast for amp, else nothing."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(self.device, dtype=getattr(torch, self.autocast_dtype))

    def exportable(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` with the autocast inside its forward, for a rung that exports a graph
        (torch.export captures it as a region of the program); `model` itself otherwise."""
        if self.autocast_dtype is None:
            return model
        import torch

        numerics = self

        class Autocast(torch.nn.Module):
            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, *args: Any, **kwargs: Any) -> Any:
                with numerics.call():
                    return self.inner(*args, **kwargs)

        return Autocast(model).eval()

    def details(self) -> dict[str, str]:
        """What to record: the CUDA flags as torch reads them now, and amp's dtype."""
        record = {}
        if self.fp32_math is not None:
            import torch

            record["matmul_fp32_precision"] = torch.backends.cuda.matmul.fp32_precision
            record["cudnn_conv_fp32_precision"] = torch.backends.cudnn.conv.fp32_precision
        if self.autocast_dtype is not None:
            record["autocast_dtype"] = self.autocast_dtype
        return record


def numerics(cell: Cell) -> Numerics:
    """The cell's Numerics, its CUDA flags already set: a rung calls it first in prepare,
    before anything is traced or compiled (Inductor reads the flags as it generates)."""
    on_cuda = cell.device == "cuda"
    fp32_math = ("tf32" if cell.precision == "tf32" else "ieee") if on_cuda else None
    amp = AUTOCAST_DTYPE[cell.device] if cell.precision == "amp" else None
    chosen = Numerics(cell.device, fp32_math, amp)
    chosen.apply()
    return chosen


def cast(model: torch.nn.Module, example: Example, cell: Cell) -> tuple[torch.nn.Module, Example]:
    """Model and floating inputs in the cell's precision (the engine hands over fp32);
    token ids and masks keep their integer dtypes."""
    dtype = torch_dtype(cell.precision)
    return model.to(dtype), example.cast(dtype)


def quantized(
    model: torch.nn.Module,
    example: Example,
    cell: Cell,
    ctx: PrepareContext,
    paths: Mapping[str, str],
    scale_error: float = 1.0,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The cell's model quantized by torchao along `paths[precision]` (quantize.pytorch),
    and the details to record; a float precision's model comes back as it is. PT2E reads
    the rung's `reduce_range` option (REDUCE_OPTION) against the ISA oneDNN runs here."""
    from stackcost.quantize import is_quantized

    if not is_quantized(cell.precision):
        return model, {}
    from stackcost.env import cpu_info, onednn_cap
    from stackcost.quantize.pytorch import quantize, reduce_range

    reduce = None
    if paths[cell.precision] == "pt2e":
        requested = cell.backend_options.get("reduce_range", REDUCE_OPTION.default)
        reduce = reduce_range(requested, cpu_info()["flags"], onednn_cap())
    built, record = quantize(
        model, example, cell.precision, paths[cell.precision], ctx.calibration, scale_error,
        reduce,
    )  # fmt: skip
    return built, {"quantization": record.details()}


def probe_vec_isa() -> dict[str, str]:
    """Inductor's probe of the CPU's vector ISA, run against a cache of the machine's
    rather than the cell's fresh one, and what to record of it.

    Inductor compiles and loads a small C++ file per ISA to learn which it may use, and
    keeps the library in its kernel cache. A user's default cache holds it from their
    first compile on, but a cell's fresh cache (kept so its compile is not an earlier
    run's hit) would compile it again in every process: seconds of a cold start that no
    user's second model pays. The probe's result is kept for the process, so the cell's
    compile then uses it."""
    import os
    from pathlib import Path

    import torch
    from torch._inductor import cpu_vec_isa

    home = Path.home() / ".cache" / "stackcost" / "inductor-isa" / torch.__version__
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(home)
    try:
        isa = cpu_vec_isa.pick_vec_isa()
    finally:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before
    return {"vec_isa": str(isa) or "none", "vec_isa_probe_cache": str(home)}


def logits_of(output: Any) -> torch.Tensor:
    """The classifier's logits in a model's output: the tensor itself, the output named
    "logits" (Hugging Face heads), or else the first tensor in the output's order."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):  # dict, transformers' ModelOutput
        if "logits" in output:
            return output["logits"]
        values = list(output.values())
    elif isinstance(output, (list, tuple)):
        values = list(output)
    else:
        values = []
    for value in values:
        if value is not None:
            try:
                return logits_of(value)
            except TypeError:
                continue
    raise TypeError(f"the model returned no tensor to train on ({type(output).__name__})")


def train_step(module: Any, optimizer: Any, loss_fn: Callable[[Any, Any], Any]) -> TrainStep:
    """One optimizer step through `module`: (inputs, y) -> (loss, logits detached).

    The logits come back so the engine counts training accuracy without a second forward.
    """

    def step(x: Example, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        optimizer.zero_grad(set_to_none=True)
        logits = logits_of(x.call(module))
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        return loss.detach(), logits.detach()

    return step


def evaluator(module: Any) -> Callable[[Example], torch.Tensor]:
    """Logits in eval mode without autograd; `module` goes back to train mode after.

    no_grad, not inference_mode: a scripted module's graph executor would otherwise try to
    save inference tensors for a backward it specialised for on the training steps.
    """
    import torch

    def evaluate(x: Example) -> torch.Tensor:
        module.eval()
        try:
            with torch.no_grad():
                return logits_of(x.call(module))
        finally:
            module.train()

    return evaluate
