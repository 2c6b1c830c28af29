"""The timed loop's cells in GitHub markdown: one row per cell, units in the headers, and a
footnote for each mark the table uses."""

from __future__ import annotations

import pandas as pd

from stackcost.backends import BASELINE
from stackcost.report.frames import quant, tidy
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
from stackcost.report.units import num, rel_err
from stackcost.result import TRUSTED_STATUSES
from stackcost.workload import SIZE_AXES


def _md_header(summ: pd.DataFrame, baseline: str, multi_run: bool, spread: bool) -> list[str]:
    """The table's columns, units in the headers; a run column only across several runs,
    a column per size axis the cells have, the spread and quantization ones where used."""
    quantized = "speedup_vs_fp32" in summ  # tidy.summary adds it where a cell is quantized
    return [
        *(["run"] if multi_run else []),
        "model",
        "backend",
        "mode",
        "precision",
        "threads",
        "device",
        "batch (samples)",
        *(SIZE_AXES[a].label for a in tidy.size_columns(summ)),
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
    sizes = tidy.size_columns(summ)  # a column per size axis, by name and unit
    quantized = "speedup_vs_fp32" in summ  # tidy.summary adds it where a cell is quantized
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
            num(r.peak_rss_bytes / tidy.MIB),
            num(r.allocator_peak_bytes / tidy.MIB),
            num(r.cold_start_ms),
            num(r.startup_ms),
            rel_err(r.max_rel_err),
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
