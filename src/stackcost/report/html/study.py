"""The inference-framework study's tables (frames/study.py) on the page: one colour
gradient over each table, the best of each column in bold, * where a column beat the
reference; and the time per sample of each machine over the reference machine's."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from stackcost.report.frames import study
from stackcost.report.frames.study import StudyTable
from stackcost.report.html.plots import HEIGHT, TEMPLATE, escape_label
from stackcost.report.style import shade


def study_table(t: StudyTable) -> dict[str, Any]:
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
                style = shade(frac if t.higher_is_better else 1.0 - frac)
            cells.append(
                {"text": study.cell_text(t, series, c), "style": style, "best": best[c] == series}
            )
        rows.append({"series": series, "cells": cells})
    return {"title": t.title, "columns": list(t.table.columns), "rows": rows, "note": study.note(t)}


def ratio_figure(tables: list[StudyTable]) -> go.Figure | None:
    """Bars of T_column / T_reference per framework and workload, one colour per column;
    None when no table has a reference to compare with."""
    df = study.time_ratios(tables)
    if df.empty:
        return None
    fig = go.Figure()
    for col, part in df.groupby("column", sort=False):
        fig.add_trace(
            go.Bar(
                x=[
                    [escape_label(w) for w in part["workload"]],
                    [escape_label(f) for f in part["framework"]],
                ],
                y=part["ratio"].tolist(),
                name=escape_label(f"{col} / {part['reference'].iloc[0]}"),
                hovertemplate="T ratio %{y:.3f}<extra>%{fullData.name}</extra>",
            )
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color="#555")
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        barmode="group",
        title={"text": "time per sample vs the reference machine (T_A / T_B; below 1 is faster)"},
        yaxis={"title": {"text": "T_column / T_reference"}},
    )
    return fig
