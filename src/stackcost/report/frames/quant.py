"""What a quantized cell costs and buys, as every view shows it.

A quantized repetition records what its rung built (details["quantization"], a
stackcost.quantize.QuantRecord dump) and how its first output agrees with eager fp32
(Verification.agreement: top-1 agreement and softmax KL). Stores from before quantization
have neither: every reader here answers None for them, and views leave their columns out.

The rule all views keep: a quantized cell slower than the same rung's fp32 cell is shown
as slower ("0.80× slower"), never averaged into a mean or left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from stackcost.axes import QUANTIZED
from stackcost.env import INT8_ISA, LEGACY_CPU_FLAGS
from stackcost.result import TRUSTED_STATUSES, RepetitionResult
from stackcost.store.heldout import METRICS, HeldoutResult
from stackcost.store.runs import CellResult
from stackcost.verify import Agreement

MB = 10**6  # weight sizes are in MB (10^6 bytes), as model sizes are usually quoted
SLOWER = "slower"
SPEEDUP_NOTE = (
    "vs fp32 = the same rung's fp32 latency / this latency, on the same batch, sizes and "
    "threads; below 1× the quantized cell is slower than fp32 and says so"
)
ACCURACY_NOTE = (
    "top-1 = share of rows (samples; tokens of a sequence) whose argmax agrees with eager "
    "fp32's, worst repetition; KL = mean KL(fp32 || quantized) of the softmax, in nats"
)


def is_quantized(precision: str) -> bool:
    return precision in QUANTIZED


def record(rep: RepetitionResult) -> dict[str, Any] | None:
    """The QuantRecord a repetition stored, as a dict; None before quantization or for a
    float precision."""
    q = rep.details.get("quantization")
    return q if isinstance(q, Mapping) and "weight_bytes" in q else None


def agreement(rep: RepetitionResult) -> Agreement | None:
    """The repetition's agreement with fp32 when it decided something (rows > 0)."""
    a = rep.verification.agreement if rep.verification else None
    return a if a is not None and a.rows else None


def rep_columns(
    rep: RepetitionResult, heldout: HeldoutResult | None = None
) -> dict[str, float | None]:
    """A repetition's accuracy readout and weight sizes, as frame columns (frames/tidy.py);
    the quality its weights lost on held-out data where `stackcost heldout` stored it for
    the same weights, rung and precision (store/heldout.py), in its metric's column."""
    a, q = agreement(rep), record(rep)
    lost = {m: heldout.value if heldout and heldout.metric == m else None for m in METRICS}
    return {
        "top1": a.top1 if a else None,
        "kl": a.kl if a else None,
        "agreement_rows": float(a.rows) if a else None,
        "weight_bytes": float(q["weight_bytes"]) if q else None,
        "fp32_weight_bytes": float(q["fp32_weight_bytes"])
        if q and "fp32_weight_bytes" in q
        else None,
        **lost,
    }


def cell_record(c: CellResult) -> dict[str, Any] | None:
    """The first repetition's QuantRecord: every repetition builds the same recipe."""
    return next((q for r in c.repetitions if (q := record(r)) is not None), None)


def worst_agreement(c: CellResult) -> Agreement | None:
    """The repetition that agrees least with fp32 (lowest top-1, then highest KL)."""
    found = [a for r in c.repetitions if (a := agreement(r)) is not None]
    return min(found, key=lambda a: (a.top1, -a.kl)) if found else None


# -- text -------------------------------------------------------------------------------


def mb(value: float | None) -> str:
    """'2.1 MB'; '—' where not recorded."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value / MB:.3g} MB"


def mb_number(value: float | None) -> str:
    """A bare size in MB for a column whose header carries the unit."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value / MB:.3g}"


def weights_text(weight_bytes: float | None, fp32_bytes: float | None) -> str:
    """'2.1 MB / 8.39 MB fp32' (the quantized weights beside their fp32 size)."""
    if weight_bytes is None or (isinstance(weight_bytes, float) and math.isnan(weight_bytes)):
        return "—"
    if fp32_bytes is None or (isinstance(fp32_bytes, float) and math.isnan(fp32_bytes)):
        return mb(weight_bytes)
    return f"{mb(weight_bytes)} / {mb(fp32_bytes)} fp32"


def is_slower(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value < 1.0


def speedup_text(value: float | None, base_status: str | None) -> str:
    """'1.92× faster', '0.80× slower'; '?' after × over an fp32 cell that is not ok (as
    ratio_text marks); '—' where either side has no valid timing."""
    if value is None or not math.isfinite(value) or not base_status:
        return "—"
    mark = "" if base_status in TRUSTED_STATUSES else "?"
    shown = f"{value:.2f}"
    if value < 1.0 and shown == "1.00":  # 0.996 must not read "1.00× slower"
        shown = f"{value:.3f}"
    return f"{shown}×{mark} {SLOWER if value < 1.0 else 'faster'}"


FEW_ROWS = 32  # below this many rows a top-1 share is shown with its count


def top1_text(top1: float | None, rows: float | None = None) -> str:
    """'99.2%'; with fewer than FEW_ROWS rows, '100.0% of 1 row': one argmax is a coin,
    not a rate."""
    if top1 is None or math.isnan(top1):
        return "—"
    text = f"{top1:.1%}"
    if rows is not None and not math.isnan(rows) and rows < FEW_ROWS:
        n = int(rows)
        text += f" of {n} row{'s' if n != 1 else ''}"
    return text


def kl_text(kl: float | None) -> str:
    if kl is None or math.isnan(kl):
        return "—"
    return "inf" if math.isinf(kl) else f"{kl:.2g}"


# A quantized cell's columns in the markdown table and the HTML report's cell table.
QUANT_HEADER = (
    "vs fp32",
    "weights (MB)",
    "fp32 weights (MB)",
    "top-1 agreement (%)",
    "KL (nats)",
)


def quant_cells(r: Any) -> list[str]:
    """A cell-frame row's (frames/tidy.py) QUANT_HEADER values; '—' for a float cell and
    where a store has no such readout."""
    if not is_quantized(r.precision):
        return ["—"] * len(QUANT_HEADER)

    def get(name: str) -> float | None:
        return getattr(r, name, None)

    top1 = get("top1")
    return [
        speedup_text(r.speedup_vs_fp32, r.fp32_status),
        mb_number(get("weight_bytes")),
        mb_number(get("fp32_weight_bytes")),
        "—" if top1 is None or math.isnan(top1) else f"{top1 * 100:.1f}",
        kl_text(get("kl")),
    ]


# -- the machine's int8 ISA ---------------------------------------------------------------


def isa_features(env: Mapping[str, Any] | None) -> dict[str, bool | None]:
    """Per int8 ISA feature (env.INT8_ISA): True, False, or None where the run's record did
    not look for it (stores before avx_vnni and amx_int8 were read)."""
    cpu = (env or {}).get("cpu") or {}
    flags = cpu.get("flags")
    if not isinstance(flags, list):
        return {f: None for f in INT8_ISA}
    checked = cpu.get("flags_checked")
    looked = set(checked) if isinstance(checked, list) else set(LEGACY_CPU_FLAGS)
    return {f: (f in flags) if f in looked else None for f in INT8_ISA}


def isa_text(env: Mapping[str, Any] | None) -> str:
    """'AVX2 yes · AVX-512 VNNI yes · AVX-VNNI no · AMX-INT8 not recorded · AVX-512 BF16 no',
    then '· narrowed by ONEDNN_MAX_CPU_ISA=AVX2' where the run's shell capped a library's ISA;
    '' where the run recorded no CPU flags at all."""
    found = isa_features(env)
    if all(v is None for v in found.values()):
        return ""
    word = {True: "yes", False: "no", None: "not recorded"}
    text = " · ".join(f"{INT8_ISA[f]} {word[v]}" for f, v in found.items())
    # The flags are the CPU's; a narrowed shell runs narrower kernels, and the line says so.
    if caps := (env or {}).get("isa_caps"):
        text += " · narrowed by " + ", ".join(f"{k}={v}" for k, v in caps.items())
    return text


ISA_LABEL = "ISA features that decide int8 speed"


def isa_lines(envs: Iterable[tuple[str, Mapping[str, Any] | None]]) -> list[str]:
    """One line per distinct machine record: 'ISA features that decide int8 speed: ...',
    prefixed by the runs when they differ."""
    by_text: dict[str, list[str]] = {}
    for run_id, env in envs:
        if text := isa_text(env):
            by_text.setdefault(text, []).append(run_id)
    if len(by_text) == 1:
        return [f"{ISA_LABEL}: {next(iter(by_text))}"]
    return [f"{ISA_LABEL} (run {', '.join(ids)}): {text}" for text, ids in by_text.items()]


# -- the Pareto front -------------------------------------------------------------------


def front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both speedup (higher is better) and
    accuracy drop (lower is better), by speedup ascending."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], points[i][1]))
    kept, best_drop = [], math.inf
    for i in order:
        if points[i][1] < best_drop:
            kept.append(i)
            best_drop = points[i][1]
    return kept[::-1]
