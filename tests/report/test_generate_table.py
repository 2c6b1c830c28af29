"""The generate table's % peak: a decode step is held to the read bandwidth of a working set
of its own bytes (report/frames/generate.py, measure/peaks.Peaks.read_ceiling_gbs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackcost.cell import Cell
from stackcost.report.exports.generate import table as generate_markdown
from stackcost.report.frames.generate import generate_rows
from stackcost.result import GenerationResult, RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.store.runs import RunResult

MIB = 1 << 20
# Measured by hand on a 2-vCPU Xeon reporting 480 MiB of L3 (rounded): the cache's
# bandwidth up to 64 MiB, memory's from 256 MiB.
CURVE = [(16 * MIB, 50.0), (64 * MIB, 40.0), (256 * MIB, 20.0)]


def peaks(curve: list[tuple[int, float]] | None) -> dict:
    return {
        "threads": 1,
        "fp32_gflops": 100.0,
        "bf16_gflops": None,
        "bf16_note": "",
        "stream_gbs": 18.0,
        "read_gbs": 20.0,
        "read_by_size": curve,
        "gemm_method": "",
        "stream_method": "",
        "measured_at": "",
        "seconds": 1.0,
    }


def run(step_bytes: dict[str, int], gbs: float, curve: list | None) -> RunResult:
    """One generate cell per backend, each reading `step_bytes[backend]` a step at `gbs`."""
    records = []
    for backend, nbytes in step_bytes.items():
        cell = Cell(
            model=model_ref("llama-tiny"),
            backend=backend,
            threads=1,
            mode="generate",
            sizes={"prompt_len": 8, "new_tokens": 4},
        )
        gen = GenerationResult(
            batch=1,
            prompt_len=8,
            new_tokens=4,
            generations=3,
            ttft_ms=10.0,
            tpot_p50_ms=nbytes / gbs / 1e6,
            tpot_p90_ms=nbytes / gbs / 1e6,
            tpot_p99_ms=nbytes / gbs / 1e6,
            prefill_tokens_per_s=800.0,
            decode_tokens_per_s=100.0,
            output_tokens_per_s=90.0,
            e2e_ms=40.0,
            cold_ms=50.0,
            kv_cache_bytes=MIB,
            kv_bytes_per_element=4,
            weight_bytes=nbytes,
            bytes_per_step=nbytes,
            achieved_gbs=gbs,
            api="generate",
            timing="host clock",
        )
        records.append((cell, RepetitionResult(status="ok", generation=gen)))
    env = {"peaks": {"1": peaks(curve)}}
    return RunResult(run_id="g", db_path=Path("g.db"), env=env, spec={}, records=records)


def test_a_step_that_fits_in_the_cache_is_held_to_the_caches_bandwidth():
    steps = {"eager": 32 * MIB, "onnxruntime": 1 << 30}
    rows = {r["cell"].cell.backend: r for r in generate_rows(run(steps, 30.0, CURVE))}
    # 32 MiB: halfway (in log size) between 50 and 40 GB/s; 1 GiB: memory's 20 GB/s.
    assert rows["eager"]["ceiling_gbs"] == pytest.approx(45.0)
    assert rows["eager"]["peak_pct"] == pytest.approx(100 * 30 / 45)
    assert rows["onnxruntime"]["peak_pct"] == pytest.approx(150.0)  # above memory's: said
    assert "working set of the step's bytes" in generate_markdown(run(steps, 30.0, CURVE))


def test_a_run_measured_before_the_curve_is_held_to_the_large_arrays_read():
    (row,) = generate_rows(run({"eager": 32 * MIB}, 30.0, None))
    assert row["ceiling_gbs"] == 20.0 and row["peak_pct"] == pytest.approx(150.0)
