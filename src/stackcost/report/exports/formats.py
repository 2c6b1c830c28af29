"""Plain-text exports: a markdown summary, the tidy CSV, and JSON with run metadata.

export() picks the format; each scenario's markdown table is its own module's (run,
generate, serve, scenarios, study)."""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import pandas as pd

from stackcost.backends import BASELINE
from stackcost.report.exports import generate, run, scenarios, serve, study
from stackcost.report.frames import quant, tidy
from stackcost.report.frames.scenarios import timed_loop_only
from stackcost.report.frames.study import quant_tables, study_tables
from stackcost.report.markdown import md_escape
from stackcost.store.runs import RunResult
from stackcost.workload import SIZE_AXES

Format = Literal["md", "csv", "json"]
FORMATS: tuple[str, ...] = ("md", "csv", "json")


# The json export's units of the quantization columns, for those the cells have.
QUANT_UNITS = {
    "top1": "share of rows (0..1) whose argmax agrees with eager fp32's, worst repetition",
    "kl": "mean KL(fp32 || this) of the softmax over the last axis, nats",
    "agreement_rows": "rows (samples; tokens of a sequence) the agreement is over",
    "accuracy_drop_pt": "held-out accuracy below fp32's, percentage points (stackcost heldout)",
    "ppl_increase_pct": "held-out perplexity above eager fp32's, percent (stackcost heldout)",
    "speedup_vs_fp32": "the same rung's fp32 median / this median (below 1: slower)",
    "fp32_status": "status of that fp32 cell; the speedup is trusted only when it is ok",
}


def quant_machine_note(runs: list[RunResult]) -> str:
    """The int8 ISA of the machines the quantized cells ran on, one line each."""
    lines = quant.isa_lines((r.run_id, r.env) for r in runs)
    return "".join(f"{md_escape(line)}\n" for line in lines)


def _jsonable(value: Any) -> Any:
    """NaN, ±inf and <NA> become null (strict JSON has no literal for them), recursively."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is pd.NA:  # a size axis the cell's model does not have
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def export(
    runs: list[RunResult], fmt: Format, baseline: str = BASELINE, reference: str | None = None
) -> str:
    """The runs as md (per-cell summary, then the study's tables where the runs span
    machines), csv (per repetition) or json (cells + metadata)."""
    if fmt == "csv":
        return tidy.frame(runs).to_csv(index=False)
    every, runs = runs, timed_loop_only(runs)  # LoadGen cells: a table of their own
    summ = tidy.summary(runs, baseline)
    if fmt == "md":
        tables = study_tables(runs, reference)
        quantized = quant_tables(runs)
        loadgen = scenarios.markdown(every)
        generated = generate.markdown(every)
        served = serve.markdown(every)
        return (
            (run.markdown(summ, baseline) if not summ.empty or not (generated or served) else "")
            + (generated + "\n" if generated else "")
            + (served + "\n" if served else "")
            + ("\n" + quant_machine_note(runs) if quantized else "")
            + ("\n" + study.markdown(tables) if tables else "")
            + ("\n" + study.quant_markdown(quantized) if quantized else "")
            + ("\n" + loadgen if loadgen else "")
        )
    if fmt == "json":
        # "sizes" is the size columns again, as text: their units are in "units" instead.
        cells = _jsonable(summ.drop(columns=["log_tail", "sizes"]).to_dict("records"))
        payload = {
            "baseline": baseline,
            "units": {
                "*_ms": "milliseconds per batch",
                "*_per_s": "samples per second",
                "*_bytes": "bytes",
                "*_ratio": "backend / baseline on the same workload",
                "base_status": "status of the baseline cell a ratio divides by; the ratio "
                "is trusted only when it is ok ('' = no valid baseline: no ratio)",
                "marked_*": "a disturbed cell's timing: shown marked, used by no ratio",
                "ci_*": "the cell's CI, over its repetitions (each one process): ci_method "
                "names it; null with fewer than 2 valid repetitions (one repetition's CI is "
                "within-process only: the csv's within_ci_*)",
                "max_rel_err": "max|out - ref| / max|ref|",
                "spread_*": "relative SDs: within = of one process's window medians (the "
                "mean over processes), between = of the processes' medians; null with fewer "
                "than 2 valid repetitions",
                **{k: v for k, v in QUANT_UNITS.items() if k in summ},
                # One per size axis of these cells (null where a model has no such axis).
                **{a: SIZE_AXES[a].unit for a in tidy.size_columns(summ)},
            },
            "runs": [
                {"run_id": r.run_id, "env": _jsonable(r.env), "spec": _jsonable(r.spec)}
                for r in runs
            ],
            "cells": cells,
            **({"scenarios": loadgen} if (loadgen := scenarios.records(every)) else {}),
        }
        return json.dumps(payload, indent=2, default=str, allow_nan=False)
    raise ValueError(f"unknown export format {fmt!r} (allowed: {', '.join(FORMATS)})")
