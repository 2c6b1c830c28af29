"""The page's views of the timed loop's inference cells: the figure slots (sweeps, ratios,
startup, machines, verification) and the tables (throughput, the study's, verification,
failures, unstable and disturbed cells, best batches, every cell), with the counts the
page opens with."""

from __future__ import annotations

from typing import Any

import pandas as pd

from stackcost.report.frames import quant, tidy
from stackcost.report.frames.study import StudyTable
from stackcost.report.html import plots, study
from stackcost.report.html.slots import Figures
from stackcost.report.marks import (
    CI_NOTE,
    DISTURBED_NOTE,
    ci_over_repeats,
    ratio_cell,
    ratio_note,
    timing_cell,
)
from stackcost.report.style import shade
from stackcost.report.units import num, rel_err
from stackcost.result import MEASURED_STATUSES, TRUSTED_STATUSES, headline
from stackcost.store.runs import RunResult
from stackcost.workload import SIZE_AXES

NOT_RUN = ("skipped", "unavailable", "unsupported")


def _gradient_table(t: tidy.ThroughputTable) -> dict[str, Any]:
    """Rows of cells with a per-column background and the column's best in bold."""
    table = t.table
    rows = [{"series": s, "cells": []} for s in table.index]
    for b in table.columns:
        col = table[b]
        lo, hi, best = col.min(), col.max(), col.idxmax() if col.notna().any() else None
        for row, (series, v) in zip(rows, col.items(), strict=True):
            if pd.isna(v):
                row["cells"].append({"text": "—", "style": "", "best": False})
                continue
            frac = 1.0 if hi == lo else (v - lo) / (hi - lo)
            row["cells"].append(
                {"text": num(float(v)), "style": shade(frac), "best": series == best}
            )
    return {"title": t.title, "columns": [int(b) for b in table.columns], "rows": rows}


def _size_header(summ: pd.DataFrame) -> list[str]:
    """A column per size axis some cell has, by name and unit: 'resolution (px)'."""
    return [SIZE_AXES[a].label for a in tidy.size_columns(summ)]


def _sizes(r: Any, summ: pd.DataFrame) -> list[Any]:
    """The row's value on each of those axes; blank where its model has no such axis."""
    return ["" if pd.isna(v := getattr(r, a)) else int(v) for a in tidy.size_columns(summ)]


def _cell_table(summ: pd.DataFrame, baseline: str, multi_run: bool) -> dict[str, Any]:
    text_cols = ["model", "backend", "mode", "precision", "device", "status"]
    quantized = "speedup_vs_fp32" in summ  # tidy.summary adds it where a cell is quantized
    header = [
        *(["run"] if multi_run else []),
        *text_cols,
        "threads",
        "batch (samples)",
        *_size_header(summ),
        "median latency (ms)",
        "min–max over repeats (ms)",
        "95% CI over repeats (ms)",
        "throughput (samples/s)",
        f"time vs {baseline} (×)",
        f"CPU mem vs {baseline} (×)",
        "peak RSS (MiB)",
        "device peak (MiB)",
        "cold start (ms)",
        "startup (ms)",
        "max rel err",
        "tolerance",
        "valid / repeats",
        *(quant.QUANT_HEADER if quantized else []),
    ]
    rows = []
    for r in summ.itertuples(index=False):
        band = f"{num(r.band_low_ms)}–{num(r.band_high_ms)}" if r.valid and r.n_valid > 1 else "—"
        values = [
            *([r.run_id] if multi_run else []),
            r.model,
            r.series,
            r.mode,
            r.precision,
            r.device,
            r.status,
            r.threads,
            r.batch_size,
            *_sizes(r, summ),
            timing_cell(r, "median_ms"),
            band,
            ci_over_repeats(r),
            timing_cell(r, "throughput_per_s"),
            ratio_cell(r.time_ratio, r.base_status),
            ratio_cell(r.cpu_mem_ratio, r.base_status),
            num(r.peak_rss_bytes / tidy.MIB),
            num(r.allocator_peak_bytes / tidy.MIB),
            num(r.cold_start_ms),
            num(r.startup_ms),
            rel_err(r.max_rel_err),
            rel_err(r.tolerance),
            f"{r.n_valid} / {r.n_repetitions}",
        ]
        # A quantized cell slower than its fp32: its speedup cell is marked, never hidden.
        slower = len(values) if quantized and quant.is_slower(r.speedup_vs_fp32) else -1
        values += quant.quant_cells(r) if quantized else []
        rows.append({"cols": values, "status": r.status, "kind": _kind(r.status), "slower": slower})
    marks = []
    if len(summ) and summ["valid"].any():
        marks.append(CI_NOTE)
    if len(summ) and (~summ["base_status"].isin(["", *TRUSTED_STATUSES])).any():
        marks.append(ratio_note(baseline))
    if len(summ) and (summ["status"] == "disturbed").any():
        marks.append(DISTURBED_NOTE)
    if quantized:
        marks += [quant.SPEEDUP_NOTE, quant.ACCURACY_NOTE, "weights in MB = 10^6 bytes"]
    return {
        "cell_header": header,
        "cell_rows": rows,
        "cell_text_columns": len(text_cols) + multi_run,
        "cell_marks": marks,
    }


def _kind(status: str) -> str:
    """The row class: a trusted timing, one shown but not trusted, or none at all."""
    if status in TRUSTED_STATUSES:
        return "trusted"
    return "untrusted" if status in MEASURED_STATUSES else "invalid"


# A cell's identity and status, as the failure and untrusted listings show it.
def cell_header(summ: pd.DataFrame, multi_run: bool) -> list[str]:
    return [
        *(["run"] if multi_run else []),
        "model",
        "backend",
        "batch",
        *_size_header(summ),
        "precision",
        "threads",
        "device",
        "status",
    ]


def cell_cols(r: Any, summ: pd.DataFrame, multi_run: bool) -> list[Any]:
    return [
        *([r.run_id] if multi_run else []),
        r.model,
        r.series,
        r.batch_size,
        *_sizes(r, summ),
        r.precision,
        r.threads,
        r.device,
        r.status,
    ]


def _untrusted(summ: pd.DataFrame, multi_run: bool) -> tuple[list[str], list[dict[str, Any]]]:
    """Unstable and disturbed cells, each with the headline of its reason."""
    header = [*cell_header(summ, multi_run), "median (ms)", "reason"]
    rows = [
        {
            "cols": [*cell_cols(r, summ, multi_run), timing_cell(r, "median_ms")],
            "status": r.status,
            "reason": headline(r.reason) or "(no reason recorded)",
        }
        for r in tidy.untrusted(summ).itertuples(index=False)
    ]
    return header, rows


def _verification(summ: pd.DataFrame) -> dict[str, Any]:
    checked = summ[summ["max_rel_err"].notna()]
    outside = checked[
        (checked["status"] == "wrong") | (checked["max_rel_err"] > checked["tolerance"])
    ]
    return {
        "checked": len(checked),
        "ok": len(checked) - len(outside),
        "header": [
            "model",
            "backend",
            "batch",
            *_size_header(summ),
            "precision",
            "status",
            "max rel err",
            "tolerance",
        ],
        "rows": [
            [
                r.model,
                r.series,
                r.batch_size,
                *_sizes(r, summ),
                r.precision,
                r.status,
                rel_err(r.max_rel_err),
                rel_err(r.tolerance),
            ]
            for r in outside.itertuples(index=False)
        ],
    }


def _failures(summ: pd.DataFrame, multi_run: bool) -> tuple[list[str], list[dict[str, Any]]]:
    header = [*cell_header(summ, multi_run), "reason"]
    rows = [
        {
            "cols": cell_cols(r, summ, multi_run),
            "status": r.status,
            "reason": r.reason or "(no reason recorded)",
            "log_tail": r.log_tail or "",
        }
        for r in tidy.failures(summ).itertuples(index=False)
    ]
    return header, rows


def _best_batches(summ: pd.DataFrame, run_ids: list[str]) -> tuple[list[str], list[list[Any]]]:
    best = tidy.best_batches(summ, run_ids)
    sizes = tidy.size_columns(summ)
    axes = tidy.varying(summ, (*sizes, "precision", "threads", "device", "mode", "init"))
    header = [
        "run",
        "model",
        "backend",
        *(SIZE_AXES[a].label if a in sizes else a for a in axes),
        "best batch (samples)",
        "throughput (samples/s)",
        "median latency (ms)",
        "largest valid batch",
        "search stopped by",
    ]
    rows = [
        [
            r["run_id"],
            r["model"],
            r["series"],
            *("" if pd.isna(r[a]) else r[a] for a in axes),
            "—" if r["best_batch"] is None or pd.isna(r["best_batch"]) else int(r["best_batch"]),
            num(r["throughput_per_s"]),
            num(r["median_ms"]),
            "—" if pd.isna(r["largest_valid_batch"]) else int(r["largest_valid_batch"]),
            r["stopped_by"] or "no failure (stopped improving or reached max_batch)",
        ]
        for r in best.to_dict("records")
    ]
    return header, rows


def inference_plots(
    summ: pd.DataFrame,
    colors: dict[str, str],
    baseline: str,
    study_tables: list[StudyTable],
    figs: Figures,
) -> dict[str, dict[str, str]]:
    """The inference views' figure slots by name; a slot without a figure carries the note
    that says why."""
    slots: dict[str, dict[str, str]] = {}
    # Against the batch size, then each size axis some cell has ("latency vs seq len").
    for x, suffix in (("batch_size", "batch"), *((a, a) for a in tidy.size_columns(summ))):
        note = tidy.sweep_note(summ, x)
        for metric in ("latency", "throughput", "memory"):
            fig = plots.sweep_figure(summ, x, metric, colors) if not note else None
            slots[f"{metric}_{suffix}"] = figs.add(fig, note)
    left_out = tidy.untrusted_base_note(summ, baseline) if len(summ) else ""
    no_ratio = f"No backend has a valid result on a workload where {baseline} is ok."
    ratio_fig = plots.ratio_figure(summ, colors, baseline)
    ratio_notes = [left_out] if ratio_fig else [no_ratio, left_out]
    slots["ratios"] = figs.add(ratio_fig, " ".join(n for n in ratio_notes if n))
    startup = plots.startup_figure(summ, colors)
    slots["startup"] = figs.add(startup, "" if startup else "No valid cold-start times.")
    slots["machine_ratios"] = figs.add(study.ratio_figure(study_tables))
    ver_fig, ver_note = plots.verification_figure(summ)
    slots["verification"] = figs.add(ver_fig, ver_note or "No verification recorded.")
    return slots


def counts(summ: pd.DataFrame) -> dict[str, int]:
    """The headline counts of the inference cells, by what their status lets them show."""
    statuses = summ["status"] if len(summ) else pd.Series([], dtype=str)
    return {
        "cells": len(summ),
        "valid": int(summ["valid"].sum()) if len(summ) else 0,
        "unstable": int((statuses == "unstable").sum()),
        "disturbed": int((statuses == "disturbed").sum()),
        "wrong": int((statuses == "wrong").sum()),
        "failed": int((~statuses.isin([*NOT_RUN, "wrong", *MEASURED_STATUSES])).sum()),
        "skipped": int(statuses.isin(NOT_RUN).sum()),
    }


def inference_tables(
    summ: pd.DataFrame,
    runs: list[RunResult],
    baseline: str,
    study_tables: list[StudyTable],
    search_runs: list[str],
) -> dict[str, Any]:
    """The inference views' tables: throughput and study tables, verification, failures,
    unstable and disturbed cells, best batches and every cell."""
    multi_run = len(runs) > 1
    best_header, best_rows = _best_batches(summ, search_runs) if search_runs else ([], None)
    failure_header, failure_rows = _failures(summ, multi_run)
    untrusted_header, untrusted_rows = _untrusted(summ, multi_run)
    return {
        "throughput_tables": [_gradient_table(t) for t in tidy.throughput_tables(summ, baseline)],
        "study_tables": [study.study_table(t) for t in study_tables],
        "has_device_memory": bool(summ["allocator_peak_bytes"].notna().any()),
        "verification": _verification(summ),
        "failure_header": failure_header,
        "failures": failure_rows,
        "untrusted_header": untrusted_header,
        "untrusted": untrusted_rows,
        "best_header": best_header,
        "best_batches": best_rows,
        **_cell_table(summ, baseline, multi_run),
    }
