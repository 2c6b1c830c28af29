"""Small helpers shared by the backends that run torch modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from stackcost.cell import Cell
    from stackcost.workload import Example

TrainStep = Callable[[Any, Any], tuple[Any, Any]]


def torch_dtype(precision: str) -> torch.dtype:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def cast(model: torch.nn.Module, example: Example, cell: Cell) -> tuple[torch.nn.Module, Example]:
    """Model and floating inputs in the cell's precision (the engine hands over fp32);
    token ids and masks keep their integer dtypes."""
    dtype = torch_dtype(cell.precision)
    return model.to(dtype), example.cast(dtype)


def train_step(module: Any, optimizer: Any, loss_fn: Callable[[Any, Any], Any]) -> TrainStep:
    """One optimizer step through `module`: (x, y) -> (loss, logits detached).

    The logits come back so the engine counts training accuracy without a second forward.
    """

    def step(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        optimizer.zero_grad(set_to_none=True)
        logits = module(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        return loss.detach(), logits.detach()

    return step


def evaluator(module: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """Logits in eval mode without autograd; `module` goes back to train mode after.

    no_grad, not inference_mode: a scripted module's graph executor would otherwise try to
    save inference tensors for a backward it specialised for on the training steps.
    """
    import torch

    def evaluate(x: torch.Tensor) -> torch.Tensor:
        module.eval()
        try:
            with torch.no_grad():
                return module(x)
        finally:
            module.train()

    return evaluate
