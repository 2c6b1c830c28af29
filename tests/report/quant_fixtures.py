"""An in-memory run with quantized cells, for the quantization views' tests.

The tiny mlp at batch 8 on two rungs, exact timings (every sample equal):
- eager: fp32 10 ms, int8-dyn 5 ms (2× faster, top-1 97%), w8 8 ms (1.25×, top-1 100%);
- onnxruntime: fp32 4 ms, int8 5 ms (0.8×: SLOWER than its own fp32, top-1 95%), and w4
  "wrong" (top-1 60%, below its rule: no valid timing, its agreement still shown).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stackcost.axes import PRECISION_TOLERANCE, QUANTIZED
from stackcost.cell import Cell
from stackcost.env import CPU_FLAGS
from stackcost.measure.stats import summarize
from stackcost.quantize import Ops, QuantRecord
from stackcost.result import Memory, RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.store.runs import RunResult
from stackcost.verify import Agreement, Verification

FP32_BYTES = 8_400_000
# (backend, precision) -> (median ms, top-1, KL, weight bytes, status)
CELLS: dict[tuple[str, str], tuple[float, float, float, int, str]] = {
    ("eager", "fp32"): (10.0, 1.0, 0.0, FP32_BYTES, "ok"),
    ("eager", "int8-dyn"): (5.0, 0.97, 0.004, 2_100_000, "ok"),
    ("eager", "w8"): (8.0, 1.0, 0.0005, 2_100_000, "ok"),
    ("onnxruntime", "fp32"): (4.0, 1.0, 0.0, FP32_BYTES, "ok"),
    ("onnxruntime", "int8"): (5.0, 0.95, 0.01, 2_100_000, "ok"),
    ("onnxruntime", "w4"): (3.0, 0.60, 0.3, 1_050_000, "wrong"),
}
ISA_ENV: dict[str, Any] = {
    "hostname": "box",
    "cpu": {
        "model": "Test CPU",
        "flags": ["avx2", "avx512f", "avx512_vnni"],
        "flags_checked": list(CPU_FLAGS),
    },
}


def quant_rep(backend: str, precision: str, repetition: int = 0) -> RepetitionResult:
    ms, top1, kl, weights, status = CELLS[(backend, precision)]
    samples = [int(ms * 1e6)] * 20
    quantized = precision in QUANTIZED
    tolerance = PRECISION_TOLERANCE[precision]
    verification = Verification(
        max_abs_err=0.01 if quantized else 0.0,
        max_rel_err=0.02 if quantized else 0.0,
        tolerance=tolerance,
        ok=status == "ok",
        agreement=Agreement(output="0", rows=64, top1=top1, kl=kl),
        rule=QUANTIZED[precision].text(tolerance) if quantized else "",
    )
    details: dict[str, Any] = {}
    if quantized:
        details["quantization"] = QuantRecord(
            precision=precision,
            tool=f"{backend}-quantizer 1.0",
            weights="int4 asymmetric, groups of 32" if precision == "w4" else "int8 symmetric",
            activations="float" if precision.startswith("w") else "uint8 per-tensor",
            group_size=32 if precision == "w4" else None,
            ops=Ops(quantized={"Linear": 2}, float={"Softmax": 1}),
            weight_bytes=weights,
            fp32_weight_bytes=FP32_BYTES,
            notes=["a <b>note</b> from the tool"],
        ).details()
    return RepetitionResult(
        status=status,
        repetition=repetition,
        reason="top-1 agreement 60.0% < 80% (64 rows)" if status == "wrong" else "",
        stats=summarize(samples),
        samples_ns=samples,
        throughput=8 * 1e3 / ms,
        cold_start_ms=2 * ms,
        memory=Memory(
            baseline_rss_bytes=100 * 2**20,
            peak_rss_bytes=200 * 2**20,
            peak_over_baseline_bytes=100 * 2**20,
        ),
        verification=verification,
        details=details,
    )


def quant_cell(backend: str, precision: str) -> Cell:
    return Cell(model=model_ref("mlp"), backend=backend, batch_size=8, precision=precision)


def quant_run(run_id: str = "q", env: dict[str, Any] | None = None) -> RunResult:
    records = [(quant_cell(b, p), quant_rep(b, p, rep)) for (b, p) in CELLS for rep in range(2)]
    spec = {"backends": ["eager", "onnxruntime"], "protocol": {"target_ci": 0.02}}
    return RunResult(run_id, Path("q.db"), ISA_ENV if env is None else env, spec, records)
