"""Output verification against the eager fp32 reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

# Relative tolerance per precision; relative = max |out - ref| / max |ref|, a scale-free
# error that does not explode on logits near zero the way an element-wise ratio does.
DEFAULT_TOLERANCE: dict[str, float] = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2}


class Verification(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")  # inf error for NaN outputs
    reference: str = "eager-fp32"
    max_abs_err: float
    max_rel_err: float
    tolerance: float
    ok: bool
    detail: str = ""


def to_numpy(output: Any) -> np.ndarray:
    """Whatever a backend returned, as a float64 array."""
    if isinstance(output, (list, tuple)):
        output = output[0]
    if isinstance(output, dict):
        output = next(iter(output.values()))
    if hasattr(output, "detach"):  # torch.Tensor, any device or dtype
        output = output.detach().float().cpu().numpy()
    return np.asarray(output, dtype=np.float64)


def verify(output: Any, reference: np.ndarray, tolerance: float) -> Verification:
    out = to_numpy(output)
    if out.shape != reference.shape:
        return Verification(
            max_abs_err=math.inf,
            max_rel_err=math.inf,
            tolerance=tolerance,
            ok=False,
            detail=f"output shape {out.shape} != reference {reference.shape}",
        )
    abs_err = float(np.max(np.abs(out - reference))) if out.size else 0.0
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    rel_err = abs_err / scale if scale > 0 else abs_err
    if not np.all(np.isfinite(out)):
        abs_err = rel_err = math.inf
    return Verification(
        max_abs_err=abs_err, max_rel_err=rel_err, tolerance=tolerance, ok=rel_err <= tolerance
    )
