"""Small helpers shared by the backends that run torch modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from stackcost.cell import Cell


def torch_dtype(precision: str) -> torch.dtype:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def cast(
    model: torch.nn.Module, example: torch.Tensor, cell: Cell
) -> tuple[torch.nn.Module, torch.Tensor]:
    """Model and input in the cell's precision (the engine hands over fp32)."""
    dtype = torch_dtype(cell.precision)
    return model.to(dtype), example.to(dtype)
