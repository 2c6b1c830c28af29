"""One self-contained HTML report: plotly.js inlined once, no network, every string escaped."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
import plotly.graph_objects as go
from markupsafe import Markup
from matplotlib.colors import LinearSegmentedColormap, to_hex
from plotly.offline import get_plotlyjs

from stackcost.backends import BASELINE
from stackcost.env import now
from stackcost.report import costs, data, plots, quant, study, training
from stackcost.report.generate_figures import generate_only
from stackcost.report.generate_table import HEADER as GENERATION_HEADER
from stackcost.report.generate_table import caption as generation_caption
from stackcost.report.generate_table import columns, generate_rows
from stackcost.report.marks import (
    CI_NOTE,
    DISTURBED_NOTE,
    ci_over_repeats,
    ratio_cell,
    ratio_note,
    timing_cell,
)
from stackcost.report.scenarios import CAPTION as SCENARIO_CAPTION
from stackcost.report.scenarios import SCENARIO_HEADER, scenario_rows
from stackcost.report.serve_figures import goodput_figure, latency_figure
from stackcost.report.serve_table import CAPTION as SERVE_CAPTION
from stackcost.report.serve_table import HEADER as SERVE_HEADER
from stackcost.report.serve_table import few_note, serve_cells, serve_rows, slo_line
from stackcost.report.style import PALETTE, series_colors
from stackcost.report.template import PAGE
from stackcost.report.units import num
from stackcost.result import MEASURED_STATUSES, TRUSTED_STATUSES, headline
from stackcost.store.runs import RunResult
from stackcost.workload import SIZE_AXES

NOT_RUN = ("skipped", "unavailable", "unsupported")
# Orange (lowest) to green (highest) per column, as in the inference-framework study.
GRADIENT = LinearSegmentedColormap.from_list("throughput", ["#f6a04d", "#fbe7a3", "#2f9e57"])


def script_json(payload: str) -> str:
    """JSON that cannot end its <script> element early or be read as HTML.

    '<', '>' and '&' occur in JSON only inside strings, where \\u-escapes mean the same.
    """
    return (
        payload.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


@dataclass
class _Figures:
    """Collects figures in page order; their count is exposed as data-figure-count."""

    items: list[dict[str, str]] = field(default_factory=list)

    def add(self, fig: go.Figure | None, note: str = "") -> dict[str, str]:
        if fig is None:
            return {"id": "", "note": note}
        fig_id = f"sc-fig-{len(self.items)}"
        self.items.append({"id": fig_id, "json": script_json(fig.to_json())})
        return {"id": fig_id, "note": note}


def _gradient_table(t: data.ThroughputTable) -> dict[str, Any]:
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
                {"text": num(float(v)), "style": _shade(frac), "best": series == best}
            )
    return {"title": t.title, "columns": [int(b) for b in table.columns], "rows": rows}


def _shade(frac: float) -> str:
    """The gradient's background at `frac` (0 worst, 1 best), with a readable text colour."""
    rgb = GRADIENT(frac)[:3]
    luminance = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    return f"background-color:{to_hex(rgb)};color:{'#000' if luminance > 0.55 else '#fff'}"


def _study_table(t: study.StudyTable) -> dict[str, Any]:
    """A study table: one gradient over the whole table (one batch size), the best of each
    column in bold, * where a column beat the reference column on that row."""
    values = t.table.stack().dropna()
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (0.0, 0.0)
    best = {c: t.best(c) for c in t.table.columns}
    rows = []
    for series in t.table.index:
        cells = []
        for c in t.table.columns:
            v = t.table.at[series, c]
            style = ""
            if not pd.isna(v):
                frac = 1.0 if hi == lo else (float(v) - lo) / (hi - lo)
                style = _shade(frac if t.higher_is_better else 1.0 - frac)
            cells.append(
                {"text": study.cell_text(t, series, c), "style": style, "best": best[c] == series}
            )
        rows.append({"series": series, "cells": cells})
    return {"title": t.title, "columns": list(t.table.columns), "rows": rows, "note": study.note(t)}


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested env dicts as 'versions.torch' -> '2.13.0' rows."""
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list):
        text = ", ".join(str(v) for v in value) if value else "—"
    else:
        text = "—" if value is None else str(value)
    return [(prefix, text)]


def _env_rows(env: dict[str, Any]) -> list[tuple[str, str]]:
    """The flattened record, with the int8 ISA features named and placed after the CPU's
    flags: what a quantized cell's speed depends on, read at a glance."""
    rows = _flatten(env)
    isa = quant.isa_text(env)
    if not isa:
        return rows
    keys = [k for k, _ in rows]
    at = keys.index("cpu.flags") + 1 if "cpu.flags" in keys else 0
    return [*rows[:at], (quant.ISA_LABEL, isa), *rows[at:]]


def _generation_pareto(runs: list[RunResult], baseline: str, figs: _Figures) -> dict | None:
    """A decoder's quantized generate cells: speedup in TPOT p50 over the same rung's fp32
    against the quality lost (held-out perplexity where `stackcost heldout` stored it for
    the same weights, else top-1 disagreement); None without a quantized generate cell."""
    summ = data.summary(generate_only(runs), baseline)
    if not data.has_quantized(summ):
        return None
    colors = series_colors(data.series_order(summ, baseline))
    return figs.add(*plots.pareto_figure(summ, colors))


def _quantization(
    runs: list[RunResult], summ: pd.DataFrame, colors: dict[str, str], figs: _Figures
) -> dict[str, Any] | None:
    """The quantized precisions' section: the Pareto figure, the study's quantized table,
    and per quantized cell what its rung built; None when no cell is quantized."""
    if "speedup_vs_fp32" not in summ:
        return None
    fig, note = plots.pareto_figure(summ, colors)
    built = {(r.run_id, c.cell.key()): c for r in runs for c in r.cells()}
    q = summ[summ["precision"].map(quant.is_quantized)]
    header = [
        *_cell_header(summ, len(runs) > 1),
        *quant.QUANT_HEADER,
        "rows",
        "max rel err",
        "tool",
        "weights as",
        "activations as",
        "ops quantized / float",
        "calibration",
        "acceptance rule",
        "notes",
    ]
    rows = []
    for r in q.itertuples(index=False):
        c = built.get((r.run_id, r.cell_key))
        rec = quant.cell_record(c) if c else None
        verified = [x.verification for x in c.repetitions if x.verification] if c else []
        n_rows = getattr(r, "agreement_rows", None)
        rows.append(
            {
                "cols": [
                    *_cell_cols(r, summ, len(runs) > 1),
                    *quant.quant_cells(r),
                    "—" if n_rows is None or pd.isna(n_rows) else int(n_rows),
                    _err(r.max_rel_err),
                    *(_record_cols(rec) if rec else ["— (not recorded)", *["—"] * 4]),
                    next((v.rule for v in verified if v.rule), "—"),
                    "; ".join(rec.get("notes") or []) if rec else "",
                ],
                "status": r.status,
                "slower": quant.is_slower(r.speedup_vs_fp32),
            }
        )
    return {
        "plot": figs.add(fig, note),
        "isa": quant.isa_lines((r.run_id, r.env) for r in runs),
        "tables": [_quant_study_table(t) for t in study.quant_tables(runs)],
        "table_note": study.QUANT_NOTE,
        "header": header,
        "rows": rows,
        "slower_col": len(_cell_header(summ, len(runs) > 1)),
        "notes": [quant.SPEEDUP_NOTE, quant.ACCURACY_NOTE, "weights in MB = 10^6 bytes"],
    }


def _record_cols(rec: dict[str, Any]) -> list[str]:
    """Tool, weights, activations, ops and calibration of a QuantRecord, as text."""
    ops = rec.get("ops") or {}

    def counts(kind: str) -> str:
        return ", ".join(f"{op} {n}" for op, n in (ops.get(kind) or {}).items()) or "none"

    cal = rec.get("calibration")
    calibration = (
        f"{cal.get('set', '?')}: {cal.get('batches', '?')} batches, "
        f"{cal.get('samples', '?')} samples"
        if isinstance(cal, dict)
        else "none (not calibrated)"
    )
    weights = str(rec.get("weights", "—"))
    if rec.get("group_size") and "group" not in weights:  # the tool's text may say it already
        weights += f", groups of {rec['group_size']}"
    return [
        str(rec.get("tool", "—")),
        weights,
        str(rec.get("activations", "—")),
        f"quantized: {counts('quantized')}; float: {counts('float')}",
        calibration,
    ]


def _quant_study_table(t: study.QuantTable) -> dict[str, Any]:
    return {
        "title": t.title,
        "header": t.header,
        "rows": [
            {
                "series": f,
                "cells": [{"text": c, "slower": (f, i) in t.slower} for i, c in enumerate(cells)],
            }
            for f, cells in t.rows
        ],
    }


def _size_header(summ: pd.DataFrame) -> list[str]:
    """A column per size axis some cell has, by name and unit: 'resolution (px)'."""
    return [SIZE_AXES[a].label for a in data.size_columns(summ)]


def _sizes(r: Any, summ: pd.DataFrame) -> list[Any]:
    """The row's value on each of those axes; blank where its model has no such axis."""
    return ["" if pd.isna(v := getattr(r, a)) else int(v) for a in data.size_columns(summ)]


def _cell_table(summ: pd.DataFrame, baseline: str, multi_run: bool) -> dict[str, Any]:
    text_cols = ["model", "backend", "mode", "precision", "device", "status"]
    quantized = "speedup_vs_fp32" in summ  # data.summary adds it where a cell is quantized
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
            num(r.peak_rss_bytes / data.MIB),
            num(r.allocator_peak_bytes / data.MIB),
            num(r.cold_start_ms),
            num(r.startup_ms),
            _err(r.max_rel_err),
            _err(r.tolerance),
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
def _cell_header(summ: pd.DataFrame, multi_run: bool) -> list[str]:
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


def _cell_cols(r: Any, summ: pd.DataFrame, multi_run: bool) -> list[Any]:
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
    header = [*_cell_header(summ, multi_run), "median (ms)", "reason"]
    rows = [
        {
            "cols": [*_cell_cols(r, summ, multi_run), timing_cell(r, "median_ms")],
            "status": r.status,
            "reason": headline(r.reason) or "(no reason recorded)",
        }
        for r in data.untrusted(summ).itertuples(index=False)
    ]
    return header, rows


def _err(value: float) -> str:
    if value is None or math.isnan(value):
        return "—"
    return "inf" if math.isinf(value) else f"{value:.1e}"


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
                _err(r.max_rel_err),
                _err(r.tolerance),
            ]
            for r in outside.itertuples(index=False)
        ],
    }


def _failures(summ: pd.DataFrame, multi_run: bool) -> tuple[list[str], list[dict[str, Any]]]:
    header = [*_cell_header(summ, multi_run), "reason"]
    rows = [
        {
            "cols": _cell_cols(r, summ, multi_run),
            "status": r.status,
            "reason": r.reason or "(no reason recorded)",
            "log_tail": r.log_tail or "",
        }
        for r in data.failures(summ).itertuples(index=False)
    ]
    return header, rows


def _best_batches(summ: pd.DataFrame, run_ids: list[str]) -> tuple[list[str], list[list[Any]]]:
    best = data.best_batches(summ, run_ids)
    sizes = data.size_columns(summ)
    axes = data.varying(summ, (*sizes, "precision", "threads", "device", "mode", "init"))
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


def _costs(
    runs: list[RunResult], summ: pd.DataFrame, colors: dict[str, str], figs: _Figures
) -> dict[str, Any]:
    """The "where the time goes" section: its figures registered, its tables as rows."""
    sec = costs.section(runs, summ, colors)
    return {
        "profiled": sec.profiled,
        "note": sec.note,
        "plots": {k: figs.add(p.fig, p.note) for k, p in sec.panels.items()},
        "notes": {k: p.notes for k, p in sec.panels.items()},
        "op_tables": sec.op_tables,
        "peak_header": sec.peak_header,
        "peak_rows": sec.peak_rows,
        "best_tables": sec.best_tables,
    }


def _inference_only(runs: list[RunResult]) -> list[RunResult]:
    """The runs with their timed loop's inference cells only: what the inference views
    see (training runs and LoadGen scenario cells have sections of their own)."""
    return [
        dataclasses.replace(
            r,
            records=[x for x in r.records if x[0].mode == "infer" and x[0].scenario is None],
        )
        for r in runs
    ]


def _generation(runs: list[RunResult], baseline: str, figs: _Figures) -> dict[str, Any]:
    """The token generation section: generate cells have a table of their own (tokens, not
    forward passes) and, where some are quantized, their Pareto figure."""
    rows = [
        {"status": g["cell"].status, "cols": columns(g)} for r in runs for g in generate_rows(r)
    ]
    return {
        "generation": rows,
        "generation_pareto": _generation_pareto(runs, baseline, figs) if rows else None,
        "generation_header": GENERATION_HEADER,
        "generation_caption": generation_caption(
            [g["cell"].cell.model for r in runs for g in generate_rows(r)]
        ),
    }


def _serving(runs: list[RunResult], figs: _Figures) -> dict[str, Any]:
    """The serving section: each serve cell's rate sweep as rows, its latency and goodput
    figures, and the SLO it was held to."""
    rows = [row for r in runs for row in serve_rows(r)]
    figures = (
        [figs.add(f(r)) for r in runs if serve_cells(r) for f in (latency_figure, goodput_figure)]
        if rows
        else []
    )
    return {
        "serving": rows,
        "serving_header": SERVE_HEADER,
        "serving_caption": ". ".join([SERVE_CAPTION, *few_note(rows)]),
        "serving_plots": [p for p in figures if p["id"]],
        "serving_slo": [slo_line(r) for r in runs if serve_cells(r)],
    }


def _inference_plots(
    summ: pd.DataFrame,
    colors: dict[str, str],
    baseline: str,
    study_tables: list[study.StudyTable],
    figs: _Figures,
) -> dict[str, dict[str, str]]:
    """The inference views' figure slots by name; a slot without a figure carries the note
    that says why."""
    slots: dict[str, dict[str, str]] = {}
    # Against the batch size, then each size axis some cell has ("latency vs seq len").
    for x, suffix in (("batch_size", "batch"), *((a, a) for a in data.size_columns(summ))):
        note = data.sweep_note(summ, x)
        for metric in ("latency", "throughput", "memory"):
            fig = plots.sweep_figure(summ, x, metric, colors) if not note else None
            slots[f"{metric}_{suffix}"] = figs.add(fig, note)
    left_out = data.untrusted_base_note(summ, baseline) if len(summ) else ""
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


def _training(runs: list[RunResult], figs: _Figures) -> dict[str, dict[str, str]] | None:
    """The training section's figure slots; None without a training epoch."""
    epochs = training.epochs_frame(runs)
    if not len(epochs):
        return None
    return {
        "accuracy": figs.add(training.accuracy_figure(epochs, list(PALETTE))),
        "summary": figs.add(training.summary_figure(epochs, list(PALETTE))),
        "agreement": figs.add(*training.agreement_figure(runs, list(PALETTE))),
    }


def _counts(summ: pd.DataFrame) -> dict[str, int]:
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


def _nav(
    has_cells: bool, sections: dict[str, bool], quantization: bool, batch_search: bool
) -> list[tuple[str, str]]:
    """The page's navigation: (anchor, name) of each section the page has, in page order.
    `sections` says which of training, scenarios, generation and serving it has."""
    inference_nav = [
        ("latency", "latency"),
        ("throughput", "throughput"),
        ("memory", "memory"),
        ("ratios", "ratios"),
        ("startup", "startup"),
        ("verification", "verification"),
        *([("quantization", "quantized precisions")] if quantization else []),
        ("failures", "failures"),
        ("untrusted", "unstable & disturbed"),
        *([("best-batch", "best batch")] if batch_search else []),
        ("cells", "all cells"),
        ("costs", "where the time goes"),
    ]
    return [
        *([("training", "training")] if sections["training"] else []),
        *([("scenarios", "LoadGen scenarios")] if sections["scenarios"] else []),
        *([("generation", "token generation")] if sections["generation"] else []),
        *([("serving", "serving under load")] if sections["serving"] else []),
        *(inference_nav if has_cells else []),
        ("environment", "environment"),
    ]


def _tables(
    summ: pd.DataFrame,
    runs: list[RunResult],
    baseline: str,
    study_tables: list[study.StudyTable],
    search_runs: list[str],
) -> dict[str, Any]:
    """The inference views' tables: throughput and study tables, verification, failures,
    unstable and disturbed cells, best batches and every cell."""
    multi_run = len(runs) > 1
    best_header, best_rows = _best_batches(summ, search_runs) if search_runs else ([], None)
    failure_header, failure_rows = _failures(summ, multi_run)
    untrusted_header, untrusted_rows = _untrusted(summ, multi_run)
    return {
        "throughput_tables": [_gradient_table(t) for t in data.throughput_tables(summ, baseline)],
        "study_tables": [_study_table(t) for t in study_tables],
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


def _run_records(runs: list[RunResult]) -> list[dict[str, Any]]:
    """The environment section: each run's machine record and spec."""
    return [
        {
            "run_id": r.run_id,
            "env": _env_rows(r.env),
            "spec": json.dumps(r.spec, indent=2, sort_keys=True, default=str),
        }
        for r in runs
    ]


def render_html(
    runs: list[RunResult],
    baseline: str = BASELINE,
    title: str = "",
    suite: tuple[str, Sequence[str]] | None = None,
    reference: str | None = None,
) -> str:
    """The whole report as one HTML string that opens offline. `suite` is the suite's
    name and workload labels, when the runs are a named suite's (`report --suite`);
    `reference` the machine column the study tables' asterisks compare with."""
    inference = _inference_only(runs)
    summ = data.summary(inference, baseline)
    colors = series_colors(data.series_order(summ, baseline)) if len(summ) else {}
    study_tables = study.study_tables(inference, reference)
    # Each section registers its figures in page order: their ids follow it.
    figs = _Figures()
    generation = _generation(runs, baseline, figs)
    serving = _serving(runs, figs)
    plot_slots = _inference_plots(summ, colors, baseline, study_tables, figs)
    training_slots = _training(runs, figs)
    cost_section = _costs(inference, summ, colors, figs) if len(summ) else None
    quantization = _quantization(inference, summ, colors, figs) if len(summ) else None
    scenarios = scenario_rows(runs)  # serving cells too: LoadGen's headline
    search_runs = data.wants_batch_search(runs)
    sections = {
        "training": bool(training_slots),
        "scenarios": bool(scenarios),
        "generation": bool(generation["generation"]),
        "serving": bool(serving["serving"]),
    }
    context = {
        "title": title or "stackcost report",
        "generated_at": now(),
        "baseline": baseline,
        "has_cells": len(summ) > 0,
        "counts": _counts(summ),
        "nav": _nav(len(summ) > 0, sections, bool(quantization), bool(search_runs)),
        "plots": plot_slots,
        "size_axes": data.size_columns(summ),
        "training": training_slots,
        "scenarios": scenarios,
        "scenario_header": SCENARIO_HEADER,
        "scenario_caption": SCENARIO_CAPTION,
        **generation,
        **serving,
        **_tables(summ, runs, baseline, study_tables, search_runs),
        "runs": _run_records(runs),
        "costs": cost_section,
        "quantization": quantization,
        # Runs of several models (a `stackcost suite`): TorchBench's summary first.
        "suite": _suite(runs, suite, baseline),
        "figures": figs.items,
        "plotlyjs": get_plotlyjs(),
    }
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(PAGE).render(**context)


def write_html(runs: list[RunResult], path: str | Path, baseline: str = BASELINE) -> Path:
    path = Path(path)
    path.write_text(render_html(runs, baseline), encoding="utf-8")
    return path


def _suite(runs: list[RunResult], suite: tuple[str, Sequence[str]] | None, baseline: str) -> Markup:
    """The suite summary: of a named suite, or of any runs that span several models."""
    from stackcost.report.suite_summary import suite_section

    if suite is not None:
        name, expected = suite
        return Markup(suite_section(runs, name, expected, baseline=baseline))
    models = {cell.model.name for r in runs for cell, _ in r.records if cell.mode != "train"}
    return Markup(suite_section(runs, baseline=baseline) if len(models) > 1 else "")
