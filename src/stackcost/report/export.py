"""Plain-text exports: a markdown summary, the tidy CSV, and JSON with run metadata."""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import pandas as pd

from stackcost.backends import BASELINE
from stackcost.report import data, quant
from stackcost.report.markdown import md_escape
from stackcost.report.marks import (
    CI_NOTE,
    DISTURBED_NOTE,
    SPREAD,
    SPREAD_NOTE,
    ci_over_repeats,
    ratio_cell,
    ratio_note,
    spread_cell,
    timing_cell,
)
from stackcost.report.units import num
from stackcost.result import TRUSTED_STATUSES
from stackcost.store.runs import RunResult
from stackcost.workload import SIZE_AXES

Format = Literal["md", "csv", "json"]
FORMATS: tuple[str, ...] = ("md", "csv", "json")


def _err(value: float) -> str:
    if value is None or math.isnan(value):
        return "—"
    return "inf" if math.isinf(value) else f"{value:.1e}"


def _md_header(summ: pd.DataFrame, baseline: str, multi_run: bool, spread: bool) -> list[str]:
    """The table's columns, units in the headers; a run column only across several runs,
    a column per size axis the cells have, the spread and quantization ones where used."""
    quantized = "speedup_vs_fp32" in summ  # data.summary adds it where a cell is quantized
    return [
        *(["run"] if multi_run else []),
        "model",
        "backend",
        "mode",
        "precision",
        "threads",
        "device",
        "batch (samples)",
        *(SIZE_AXES[a].label for a in data.size_columns(summ)),
        "status",
        "repeats",
        "median (ms)",
        "min–max over repeats (ms)",
        "95% CI over repeats (ms)",
        "throughput (samples/s)",
        f"time vs {baseline} (×)",
        "peak RSS (MiB)",
        "device peak (MiB)",
        "cold start (ms)",
        "startup (ms)",
        "max rel err",
        *([SPREAD] if spread else []),
        *(quant.QUANT_HEADER if quantized else []),
        "reason",
    ]


def _md_notes(summ: pd.DataFrame, baseline: str, spread: bool) -> list[str]:
    """What the marks in the table mean, for those it uses."""
    notes = []
    if summ["valid"].any():
        notes.append(CI_NOTE)
    if (~summ["base_status"].isin(["", *TRUSTED_STATUSES])).any():  # some ratio marked ?
        notes.append(ratio_note(baseline))
    if (summ["status"] == "disturbed").any():
        notes.append(DISTURBED_NOTE)
    if spread:
        notes.append(SPREAD_NOTE)
    if "speedup_vs_fp32" in summ:
        notes += [quant.SPEEDUP_NOTE, quant.ACCURACY_NOTE, "weights in MB = 10^6 bytes"]
    return notes


def markdown(summ: pd.DataFrame, baseline: str = BASELINE) -> str:
    """A GitHub markdown table, one row per cell, units in the headers; a footnote says
    what the marks mean when any is used."""
    multi_run = summ["run_id"].nunique() > 1
    sizes = data.size_columns(summ)  # a column per size axis, by name and unit
    quantized = "speedup_vs_fp32" in summ  # data.summary adds it where a cell is quantized
    spread = bool(summ["spread_between"].notna().any())  # a cell with 2+ valid repetitions
    header = _md_header(summ, baseline, multi_run, spread)
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |"]
    numeric = [h.endswith(")") or h in ("max rel err", "repeats", "vs fp32") for h in header]
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    for r in summ.itertuples(index=False):
        band = f"{num(r.band_low_ms)}–{num(r.band_high_ms)}" if r.valid else "—"
        row = [
            *([r.run_id] if multi_run else []),
            r.model,
            r.series,
            r.mode,
            r.precision,
            r.threads,
            r.device,
            r.batch_size,
            *("" if pd.isna(v := getattr(r, a)) else int(v) for a in sizes),
            r.status,
            r.n_valid if r.valid else r.n_repetitions,
            timing_cell(r, "median_ms"),
            band,
            ci_over_repeats(r),
            timing_cell(r, "throughput_per_s"),
            ratio_cell(r.time_ratio, r.base_status),
            num(r.peak_rss_bytes / data.MIB),
            num(r.allocator_peak_bytes / data.MIB),
            num(r.cold_start_ms),
            num(r.startup_ms),
            _err(r.max_rel_err),
            *([spread_cell(r)] if spread else []),
        ]
        # A slower quantized cell's speedup in bold: escaped first, the ** added after.
        quant_cols = [md_escape(v) for v in quant.quant_cells(r)] if quantized else []
        if quantized and quant.is_slower(r.speedup_vs_fp32):
            quant_cols[0] = f"**{quant_cols[0]}**"
        tail = md_escape(r.reason if r.status != "ok" else "")
        lines.append("| " + " | ".join([*map(md_escape, row), *quant_cols, tail]) + " |")
    footer = "".join(f"\n{md_escape(n)}\n" for n in _md_notes(summ, baseline, spread))
    return "\n".join(lines) + "\n" + footer


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


def generate_markdown(runs: list[RunResult]) -> str:
    """The generate cells' table (report/generate_table.py) as markdown; '' without any."""
    from stackcost.report.generate_table import generate_markdown as table

    return "\n\n".join(t for r in runs if (t := table(r)))


def serve_markdown(runs: list[RunResult]) -> str:
    """The serve cells' rate sweeps (report/serve_table.py) as markdown; '' without any."""
    from stackcost.report.serve_table import serve_cells
    from stackcost.report.serve_table import serve_markdown as table

    return "\n\n".join(table(r) for r in runs if serve_cells(r))


def export(
    runs: list[RunResult], fmt: Format, baseline: str = BASELINE, reference: str | None = None
) -> str:
    """The runs as md (per-cell summary, then the study's tables where the runs span
    machines), csv (per repetition) or json (cells + metadata)."""
    from stackcost.report import scenarios

    if fmt == "csv":
        return data.frame(runs).to_csv(index=False)
    every, runs = runs, scenarios.timed_loop_only(runs)  # LoadGen cells: a table of their own
    summ = data.summary(runs, baseline)
    if fmt == "md":
        from stackcost.report import study

        tables = study.study_tables(runs, reference)
        quantized = study.quant_tables(runs)
        loadgen = scenarios.scenario_markdown(every)
        generated = generate_markdown(every)
        served = serve_markdown(every)
        return (
            (markdown(summ, baseline) if not summ.empty or not (generated or served) else "")
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
                **{a: SIZE_AXES[a].unit for a in data.size_columns(summ)},
            },
            "runs": [
                {"run_id": r.run_id, "env": _jsonable(r.env), "spec": _jsonable(r.spec)}
                for r in runs
            ],
            "cells": cells,
            **({"scenarios": loadgen} if (loadgen := scenarios.scenario_records(every)) else {}),
        }
        return json.dumps(payload, indent=2, default=str, allow_nan=False)
    raise ValueError(f"unknown export format {fmt!r} (allowed: {', '.join(FORMATS)})")
