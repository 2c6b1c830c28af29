"""Small helpers shared by the backends that run torch modules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import PrepareContext
    from stackcost.cell import Cell
    from stackcost.workload import Example

TrainStep = Callable[[Any, Any], tuple[Any, Any]]


def torch_dtype(precision: str) -> torch.dtype:
    """The float dtype a cell's model and inputs take; a quantized precision's model is
    quantized from fp32 (stackcost.quantize), so it starts in fp32."""
    import torch

    floats = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    return floats.get(precision, torch.float32)


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
    and the details to record; a float precision's model comes back as it is."""
    from stackcost.quantize import is_quantized

    if not is_quantized(cell.precision):
        return model, {}
    from stackcost.quantize.pytorch import quantize

    built, record = quantize(
        model, example, cell.precision, paths[cell.precision], ctx.calibration, scale_error
    )
    return built, {"quantization": record.details()}


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
