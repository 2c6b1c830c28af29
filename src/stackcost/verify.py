"""Output verification against the eager fp32 reference: every output tensor, by position.

A model may return a tensor, a tuple, a dict, or a Hugging Face ModelOutput; a backend
may hand back the same structure, a flat list (ONNX Runtime, in the graph's output
order), or numpy arrays. `leaves` flattens any of them the same way (dicts by insertion
order, sequences in order, None skipped), which is the order the exporters use too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from stackcost.axes import PRECISION_TOLERANCE

# Relative tolerance per precision; relative = max |out - ref| / max |ref|, a scale-free
# error that does not explode on logits near zero the way an element-wise ratio does.
DEFAULT_TOLERANCE: dict[str, float] = dict(PRECISION_TOLERANCE)


class OutputError(BaseModel):
    """One output tensor's agreement with its reference."""

    model_config = ConfigDict(ser_json_inf_nan="constants")
    name: str
    shape: list[int]
    max_abs_err: float
    max_rel_err: float
    ok: bool


class Verification(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")  # inf error for NaN outputs
    reference: str = "eager-fp32"
    max_abs_err: float  # the worst output's
    max_rel_err: float
    tolerance: float
    ok: bool
    detail: str = ""
    outputs: list[OutputError] = []  # per output tensor (empty in stores before issue 13)


Named = list[tuple[str, np.ndarray]]


def leaves(output: Any, prefix: str = "") -> Named:
    """Every tensor in `output`, named by its path ("logits", "1", "encoder.0"), as float64."""
    if output is None:
        return []
    if isinstance(output, Mapping):  # dict, OrderedDict, transformers' ModelOutput
        items = list(output.items())
    elif isinstance(output, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(output)]
    else:
        return [(prefix or "output", _array(output))]
    out: Named = []
    for key, value in items:
        out.extend(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _array(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch.Tensor, any device or dtype
        value = value.detach().float().cpu().numpy()
    elif hasattr(value, "data") and not isinstance(value, np.ndarray):  # an OpenVINO tensor
        value = value.data
    return np.asarray(value, dtype=np.float64)


def to_numpy(output: Any) -> np.ndarray:
    """The first output tensor, as float64 (a single-output model's output)."""
    return leaves(output)[0][1]


def verify(output: Any, reference: Named | np.ndarray, tolerance: float) -> Verification:
    """Compare every output tensor with the reference's, by position; the worst decides."""
    if isinstance(reference, np.ndarray):
        reference = [("output", reference)]
    got = leaves(output)
    if len(got) != len(reference):
        return _failed(
            tolerance,
            f"{len(got)} outputs != reference's {len(reference)} "
            f"({', '.join(n for n, _ in reference)})",
        )
    errors = []
    for (name, ref), (_, out) in zip(reference, got, strict=True):
        if out.shape != ref.shape:
            return _failed(tolerance, f"output {name} shape {out.shape} != reference {ref.shape}")
        abs_err = float(np.max(np.abs(out - ref))) if out.size else 0.0
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        rel_err = abs_err / scale if scale > 0 else abs_err
        if not np.all(np.isfinite(out)):
            abs_err = rel_err = math.inf
        errors.append(
            OutputError(
                name=name,
                shape=list(ref.shape),
                max_abs_err=abs_err,
                max_rel_err=rel_err,
                ok=rel_err <= tolerance,
            )
        )
    worst = max(errors, key=lambda e: e.max_rel_err)
    return Verification(
        max_abs_err=max(e.max_abs_err for e in errors),
        max_rel_err=worst.max_rel_err,
        tolerance=tolerance,
        ok=all(e.ok for e in errors),
        outputs=errors,
    )


def worst_output(v: Verification) -> str:
    """' (output NAME)' when a model has several outputs; '' otherwise."""
    if len(v.outputs) < 2:
        return ""
    return f" (output {max(v.outputs, key=lambda e: e.max_rel_err).name})"


def _failed(tolerance: float, detail: str) -> Verification:
    return Verification(
        max_abs_err=math.inf, max_rel_err=math.inf, tolerance=tolerance, ok=False, detail=detail
    )
