"""Panel 4: power against throughput per cell, energy labelled measured or estimated."""

from __future__ import annotations

import os
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from stackcost.report.frames.costs import Row, energy_points
from stackcost.report.html.costs.panel import Panel, series_color
from stackcost.report.html.plots import HEIGHT, TEMPLATE, escape_label, hover_literal


def _sources(energies: list[Any]) -> str:
    """One line for the sources of one method: the shared part, not every cell's numbers."""
    sources = list(dict.fromkeys(e.source for e in energies))
    if len(sources) == 1:
        return sources[0]
    prefix = os.path.commonprefix(sources)
    cut = prefix.rfind("; ")
    if cut > 0:
        return prefix[:cut] + "; … (per-cell figures in the hover)"
    return " | ".join(sources[:3]) + (f" | +{len(sources) - 3} more" if len(sources) > 3 else "")


MIN_FIT_POINTS = 3  # two points always fit exactly: an R² from them tests nothing


def _method_notes(df: pd.DataFrame, methods: list[str]) -> list[str]:
    """Per energy method: how many cells use it and where its figures come from."""
    notes = []
    for m in methods:
        part = df[df["method"] == m]
        notes.append(f"{m} ({len(part)} cells): {_sources([r.rep.energy for r in part['row']])}")
    return notes


def _points_trace(part: pd.DataFrame, group: str, color: str, method: str) -> go.Scatter:
    """One series' cells: filled markers when measured, hollow when estimated."""
    symbol = "circle" if method == "measured" else "circle-open"
    return go.Scatter(
        x=part["throughput"].tolist(),
        y=part["watts"].tolist(),
        mode="markers",
        name=escape_label(group),
        legendgroup=escape_label(group),
        marker={"color": color, "size": 11, "symbol": symbol, "line": {"width": 2}},
        customdata=[
            [escape_label(w), f"{spj:.4g}", escape_label(src)]
            for w, spj, src in zip(
                part["workload"], part["samples_per_joule"], part["source"], strict=True
            )
        ],
        hovertemplate="%{customdata[0]}<br>%{y:.3g} W at %{x:.4g} samples/s, "
        "%{customdata[1]} samples/J<br>%{customdata[2]}"
        f"<extra>{hover_literal(escape_label(group))}</extra>",
    )


def _fit_trace(
    pts: list[tuple[float, float]], group: str, color: str, method: str
) -> go.Scatter | str:
    """The series' least-squares line with its R², or a note saying why it has none."""
    from stackcost.measure.energy import fit_power_throughput

    if len(pts) < MIN_FIT_POINTS or len({p[0] for p in pts}) < 2:
        return (
            f"{group}: {len(pts)} point(s), {len({p[0] for p in pts})} distinct "
            f"throughput(s): no line fitted (needs {MIN_FIT_POINTS} or more points, "
            "2 or more distinct)"
        )
    slope, intercept, r2 = fit_power_throughput(pts)
    r2_text = f"R² = {r2:.3f}"
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    return go.Scatter(
        x=[x0, x1],
        y=[intercept + slope * x0, intercept + slope * x1],
        mode="lines",
        name=escape_label(f"{group} fit: {slope:.3g} W per sample/s, {r2_text}"),
        legendgroup=escape_label(group),
        line={"color": color, "dash": "dash" if method == "estimated" else "solid"},
        hovertemplate=f"P = {intercept:.4g} W + {slope:.4g} W·s/sample × throughput"
        f"<br>{r2_text} over {len(pts)} cells<extra>{hover_literal(escape_label(group))}</extra>",
    )


def _power_label(methods: list[str]) -> str:
    """The title's word on where the watts come from: never an estimate passed as measured."""
    return (
        "ESTIMATED from a power model, not measured"
        if methods == ["estimated"]
        else "measured by hardware counters"
        if methods == ["measured"]
        else "measured and ESTIMATED points are separate series, never mixed"
    )


def energy_figure(rows: list[Row], colors: dict[str, str]) -> Panel:
    """Power against throughput, one scatter per machine (side by side when the runs
    come from several), one series per backend and method, with a least-squares line and
    its R² per series of three or more points (two or more distinct throughputs)."""
    df = energy_points(rows)
    if df.empty:
        return Panel(
            None,
            "No profiled cell has an energy figure (no telemetry, or the sampler was not running).",
        )
    df = df[df["throughput"].notna()]
    if df.empty:
        return Panel(None, "No cell with an energy figure has a throughput to plot it against.")
    methods = sorted(df["method"].unique())
    notes = _method_notes(df, methods)
    machines = list(dict.fromkeys(df["machine"]))
    fig = make_subplots(
        rows=1,
        cols=len(machines),
        shared_yaxes=True,
        subplot_titles=[escape_label(m) for m in machines] if len(machines) > 1 else None,
    )
    for (machine, group), part in df.groupby(["machine", "group"], sort=False):
        col = machines.index(machine) + 1
        if len(machines) > 1:
            group = f"{group} · {machine}"
        color = series_color(colors, part["series"].iloc[0])
        method = part["method"].iloc[0]
        fig.add_trace(_points_trace(part, group, color, method), row=1, col=col)
        pts = list(zip(part["throughput"], part["watts"], strict=True))
        fit = _fit_trace(pts, group, color, method)
        if isinstance(fit, str):
            notes.append(fit)
        else:
            fig.add_trace(fit, row=1, col=col)
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        title={"text": f"power against throughput: {_power_label(methods)}"},
        hovermode="closest",
    )
    fig.update_xaxes(title_text="throughput (samples/s)")
    fig.update_yaxes(title_text="power (W)", rangemode="tozero", col=1)
    return Panel(fig, "", notes)
