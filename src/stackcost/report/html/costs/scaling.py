"""Thread scaling: speedup over one thread per workload, from any run measured at several
thread counts (no profile needed)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from stackcost.report.frames import tidy
from stackcost.report.frames.costs import SCALING_AXES, UNSTABLE_BASE, scaling_frame
from stackcost.report.html.costs.panel import Panel, series_color
from stackcost.report.html.plots import (
    HEIGHT,
    TEMPLATE,
    dropdown,
    escape_label,
    hover_literal,
    label_log_axis,
    log2_axis,
)


def _workload_label(row: pd.Series, shown: list[str]) -> str:
    """The selector's name of a workload: its axes in `shown` ('mlp · batch 4 · 32 px')."""
    fmt = {"batch_size": "batch {}", "init": "init {}"}
    parts = (
        tidy.sizes_text(row) if a == "sizes" else fmt.get(a, "{}").format(row[a])
        for a in SCALING_AXES
        if a in shown
    )
    return escape_label(" · ".join(p for p in parts if p))


def _ideal_traces(sel: pd.DataFrame, visible: bool) -> list[go.Scatter]:
    """Linear scaling from each base thread count the workload's series start at."""
    traces = []
    for base in sorted(sel["base_threads"].unique()):
        ts = sorted(sel["threads"].unique())
        traces.append(
            go.Scatter(
                x=ts,
                y=[t / base for t in ts],
                mode="lines",
                name=f"ideal (linear from {base} thread{'s' if base > 1 else ''})",
                line={"color": "#888", "dash": "dash"},
                visible=visible,
                hovertemplate="ideal %{y:.2f}× at %{x} threads<extra></extra>",
            )
        )
    return traces


def _speedup_traces(sel: pd.DataFrame, colors: dict[str, str], visible: bool) -> list[go.Scatter]:
    """One line per series; dotted and marked where its base cell was unstable."""
    traces = []
    for series, s in sel.groupby("series", sort=False):
        trusted = bool(s["base_trusted"].all())
        traces.append(
            go.Scatter(
                x=s["threads"].tolist(),
                y=s["speedup"].tolist(),
                mode="lines+markers",
                name=escape_label(series) + ("" if trusted else f" {UNSTABLE_BASE}"),
                line={
                    "color": series_color(colors, series),
                    "dash": "solid" if trusted else "dot",
                },
                visible=visible,
                customdata=list(zip(s["median_ms"], 100 * s["speedup"] / s["ideal"], strict=True)),
                hovertemplate="%{x} threads: %{y:.2f}× (median %{customdata[0]:.4g} ms, "
                f"efficiency %{{customdata[1]:.0f}}%)<extra>{hover_literal(escape_label(series))}</extra>",
            )
        )
    return traces


def _scaling_note(df: pd.DataFrame) -> str:
    note = (
        "Speedup = median latency at the smallest thread count / median latency at t, per "
        "backend and workload (all valid cells of these runs, profiled or not); the dashed "
        "line is linear scaling."
    )
    if not df["base_trusted"].all():
        note += (
            f" Dotted lines marked '{UNSTABLE_BASE}': the cell at the smallest thread count "
            "was unstable, so their speedups are indicative only."
        )
    return note


def scaling_figure(summ: pd.DataFrame, colors: dict[str, str]) -> Panel:
    """Speedup over the smallest thread count against the thread count, per series, one
    workload at a time (a selector switches them), with linear scaling dashed."""
    df = scaling_frame(summ)
    if df.empty:
        return Panel(
            None,
            "No workload was measured at two or more thread counts (e.g. --threads 1,2): "
            "no thread scaling to show.",
        )
    # A workload is named by the axes that tell them apart (the model and batch always).
    named = [a for a in SCALING_AXES if df[a].nunique() > 1 or a in ("model", "batch_size")]
    keys = list(dict.fromkeys(tuple(r[a] for a in SCALING_AXES) for _, r in df.iterrows()))
    fig = go.Figure()
    owners: list[int] = []  # which workload each trace belongs to
    labels: list[str] = []
    for gi, key in enumerate(keys):
        sel = df[[tuple(r) == key for r in df[list(SCALING_AXES)].itertuples(index=False)]]
        labels.append(_workload_label(sel.iloc[0], named))
        for trace in [*_ideal_traces(sel, gi == 0), *_speedup_traces(sel, colors, gi == 0)]:
            fig.add_trace(trace)
            owners.append(gi)
    title = "thread scaling: speedup over the smallest thread count"
    masks = [[o == gi for o in owners] for gi in range(len(keys))]
    all_t = [int(t) for t in df["threads"]]
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        title={"text": f"{title}: {labels[0]}"},
        xaxis=log2_axis(all_t, "intra-op threads"),
        yaxis={"type": "log", "title": {"text": "speedup (×, median latency ratio), log scale"}},
        updatemenus=dropdown(labels, masks, title),
        margin={"t": 110},
        hovermode="closest",
    )
    label_log_axis(fig, "yaxis", "×")
    return Panel(fig, _scaling_note(df))
