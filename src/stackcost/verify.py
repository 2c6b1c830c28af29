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
from pydantic import BaseModel, ConfigDict, Field

from stackcost.axes import PRECISION_TOLERANCE, QuantRule

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


class Agreement(BaseModel):
    """What the first output (the logits) decides, against fp32's: per row (a sample; a
    token of a sequence output), the argmax over the last axis and the softmax over it."""

    model_config = ConfigDict(ser_json_inf_nan="constants")
    output: str
    rows: int
    top1: float  # share of rows whose argmax agrees with fp32's
    kl: float  # mean KL(fp32 || this) of the softmax, nats


class Verification(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")  # inf error for NaN outputs
    reference: str = "eager-fp32"
    max_abs_err: float  # the worst output's
    max_rel_err: float
    tolerance: float
    ok: bool
    detail: str = ""
    outputs: list[OutputError] = []  # per output tensor (empty in stores before issue 13)
    # Left out where absent, so a store written before they existed exports as it did.
    agreement: Agreement | None = Field(None, exclude_if=lambda a: a is None)  # None: old store
    rule: str = Field("", exclude_if=lambda r: not r)  # a quantized precision's, as judged


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


def agreement(name: str, out: np.ndarray, ref: np.ndarray) -> Agreement:
    """Top-1 agreement and softmax KL over the last axis; every other axis is rows."""
    if ref.ndim == 0 or ref.shape[-1] < 2:  # a scalar or one value per row decides nothing
        return Agreement(output=name, rows=0, top1=math.nan, kl=math.nan)
    out2 = out.reshape(-1, out.shape[-1])
    ref2 = ref.reshape(-1, ref.shape[-1])
    top1 = float(np.mean(np.argmax(out2, axis=1) == np.argmax(ref2, axis=1)))
    if not np.all(np.isfinite(out2)):
        return Agreement(output=name, rows=len(ref2), top1=top1, kl=math.inf)
    log_p = _log_softmax(ref2)
    kl = float(np.mean(np.sum(np.exp(log_p) * (log_p - _log_softmax(out2)), axis=1)))
    return Agreement(output=name, rows=len(ref2), top1=top1, kl=max(kl, 0.0))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    from scipy.special import log_softmax

    return log_softmax(x, axis=1)


def judge(v: Verification, rule: QuantRule) -> Verification:
    """A quantized cell's verdict: its max relative error within the precision's tolerance
    and its softmax KL within the rule; the detail names every number outside it. Top-1
    agreement is reported, and judged only on held-out data (QuantRule says why)."""
    failed = [] if v.ok or v.detail else [f"max rel err {v.max_rel_err:.3g} > {v.tolerance:g}"]
    a = v.agreement
    if a is not None and a.rows and not a.kl <= rule.max_kl:
        failed.append(f"KL {a.kl:.3g} > {rule.max_kl:g} nats")
    detail = v.detail or "; ".join(failed)
    return v.model_copy(update={"ok": not detail, "detail": detail, "rule": rule.text(v.tolerance)})


def verify(
    output: Any, reference: Named | np.ndarray, tolerance: float, rule: QuantRule | None = None
) -> Verification:
    """Compare every output tensor with the reference's, by position; the worst decides.
    With a quantized precision's `rule`, the first output's agreement decides too."""
    v = _verify(output, reference, tolerance)
    return judge(v, rule) if rule is not None else v


def _verify(output: Any, reference: Named | np.ndarray, tolerance: float) -> Verification:
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
    first, (_, first_out) = reference[0], got[0]
    return Verification(
        max_abs_err=max(e.max_abs_err for e in errors),
        max_rel_err=worst.max_rel_err,
        tolerance=tolerance,
        ok=all(e.ok for e in errors),
        outputs=errors,
        agreement=agreement(first[0], first_out, first[1]),
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
