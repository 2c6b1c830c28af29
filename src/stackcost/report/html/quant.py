"""The page's quantized precisions section: the Pareto figure (speedup over fp32 against
the quality lost), the study's quantized tables, and per quantized cell what its rung built
(tool, weights, activations, ops, calibration) and the rule it was accepted by."""

from __future__ import annotations

from typing import Any

import pandas as pd

from stackcost.report.frames import quant, study
from stackcost.report.html import plots
from stackcost.report.html.run import cell_cols, cell_header
from stackcost.report.html.slots import Figures
from stackcost.report.units import rel_err
from stackcost.store.runs import RunResult


def quantization_section(
    runs: list[RunResult], summ: pd.DataFrame, colors: dict[str, str], figs: Figures
) -> dict[str, Any] | None:
    """The quantized precisions' section: the Pareto figure, the study's quantized table,
    and per quantized cell what its rung built; None when no cell is quantized."""
    if "speedup_vs_fp32" not in summ:
        return None
    fig, note = plots.pareto_figure(summ, colors)
    built = {(r.run_id, c.cell.key()): c for r in runs for c in r.cells()}
    q = summ[summ["precision"].map(quant.is_quantized)]
    header = [
        *cell_header(summ, len(runs) > 1),
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
                    *cell_cols(r, summ, len(runs) > 1),
                    *quant.quant_cells(r),
                    "—" if n_rows is None or pd.isna(n_rows) else int(n_rows),
                    rel_err(r.max_rel_err),
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
        "slower_col": len(cell_header(summ, len(runs) > 1)),
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
