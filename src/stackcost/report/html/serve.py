"""The page's serving section: each serve cell's rate sweep as rows (frames/serve.py), the
SLO it was held to, and the sweep's figures: latency against request rate per engine with
the SLO lines, and goodput against request rate. Points are the sweep's arrival rates at
their achieved rate; all at once is a burst, not a rate, and is left out."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from stackcost.report.frames.serve import CAPTION as SERVE_CAPTION
from stackcost.report.frames.serve import HEADER as SERVE_HEADER
from stackcost.report.frames.serve import (
    few_note,
    serve_cells,
    serve_rows,
    slo_line,
    sweep_of,
)
from stackcost.report.html.slots import Figures
from stackcost.result import RateFigures
from stackcost.store.runs import RunResult

SLO_LINE = {"dash": "dash", "color": "#444"}


def _points(result: RunResult) -> list[tuple[str, list[RateFigures]]]:
    out = []
    for c in serve_cells(result):
        sweep = sweep_of(c)
        if sweep is None:
            continue
        rates = [f for f in sweep.rates if f.process != "burst" and f.completed]
        if rates:
            out.append((c.cell.backend, sorted(rates, key=lambda f: f.request_rps)))
    return out


def _color(i: int) -> str:
    """The same engine keeps its color across both figures."""
    return qualitative.Plotly[i % len(qualitative.Plotly)]


def latency_figure(result: RunResult) -> go.Figure | None:
    points = _points(result)
    if not points:
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT p99", "TPOT p99"))
    top = max(f.request_rps for _, rates in points for f in rates)
    for i, (backend, rates) in enumerate(points):
        x = [f.request_rps for f in rates]
        for col, values in (
            (1, [f.ttft_ms.p99 for f in rates]),
            (2, [f.tpot_ms.p99 for f in rates]),
        ):
            line = go.Scatter(
                x=x, y=values, mode="lines+markers", name=backend, legendgroup=backend,
                showlegend=col == 1, line={"color": _color(i)},
            )  # fmt: skip
            fig.add_trace(line, row=1, col=col)
    serve = serve_cells(result)[0].cell.serve
    bounds = (serve.ttft_bound_ms, serve.tpot_bound_ms) if serve else (None, None)
    for col, bound in enumerate(bounds, start=1):
        if bound is not None:  # a trace, not a shape: shapes take log10 units on a log axis
            slo = go.Scatter(
                x=[0, top], y=[bound, bound], mode="lines", name="SLO", legendgroup="SLO",
                showlegend=col == 1, line=SLO_LINE,
            )  # fmt: skip
            fig.add_trace(slo, row=1, col=col)
    fig.update_xaxes(title_text="requests/s (achieved)")
    fig.update_yaxes(title_text="ms", type="log")
    fig.update_layout(title="latency against request rate", height=420)
    return fig


def goodput_figure(result: RunResult) -> go.Figure | None:
    points = _points(result)
    if not points:
        return None
    fig = go.Figure()
    top = max(f.request_rps for _, rates in points for f in rates)
    for i, (backend, rates) in enumerate(points):
        x, good = [f.request_rps for f in rates], [f.goodput_rps or 0.0 for f in rates]
        fig.add_trace(
            go.Scatter(x=x, y=good, mode="lines+markers", name=backend, line={"color": _color(i)})
        )
    every = {"dash": "dot", "color": "#444"}
    fig.add_trace(
        go.Scatter(x=[0, top], y=[0, top], mode="lines", name="every request good", line=every)
    )
    fig.update_layout(
        title="goodput (requests/s within both SLOs) against request rate",
        xaxis_title="requests/s (achieved)", yaxis_title="goodput, requests/s", height=420,
    )  # fmt: skip
    return fig


def serving_section(runs: list[RunResult], figs: Figures) -> dict[str, Any]:
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
