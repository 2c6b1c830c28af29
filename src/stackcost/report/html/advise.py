"""The page's advice section: each stored `stackcost advise` answer, its recommendation
and how it was decided (frames/advise.py), every cell's evidence, and its Pareto figure:
latency against quality lost (or peak RSS without a quality bound), the marker's size its
memory, the front drawn through the cells no other beats on both."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from stackcost.advise.advice import Advice
from stackcost.report.frames.advise import (
    front,
    header,
    headline,
    lines,
    pareto_axes,
    pareto_points,
    pareto_title,
    row,
    second_axis,
    second_value,
)
from stackcost.report.html.slots import Figures
from stackcost.report.style import series_colors

_SYMBOLS = {
    "fp32": "circle",
    "int8-dyn": "diamond",
    "int8": "square",
    "w8": "diamond",
    "w4": "triangle-up",
}


def pareto_figure(advice: Advice) -> go.Figure | None:
    """One point per measured cell; None when no cell has both figures."""
    axis = second_axis(advice)
    points = [p for p in pareto_points(advice) if second_value(p, axis) is not None]
    if not points:
        return None
    fig = go.Figure()
    colors = series_colors(p.backend for p in points)
    biggest = max((p.memory_mib or 0.0) for p in points) or 1.0
    for rung, color in colors.items():
        mine = [p for p in points if p.backend == rung]
        fig.add_trace(
            go.Scatter(
                x=[p.latency_ms for p in mine], y=[second_value(p, axis) for p in mine],
                mode="markers", name=rung, text=[p.label for p in mine],
                hovertemplate="%{text}<br>%{x:.3g} ms, %{y:.3g}<extra></extra>",
                marker={
                    "color": color,
                    "symbol": [_SYMBOLS.get(p.precision, "circle") for p in mine],
                    "size": [8 + 22 * (p.memory_mib or 0.0) / biggest for p in mine],
                    "line": {"width": [3 if p.role else 0.5 for p in mine], "color": "#000"},
                },
            )
        )  # fmt: skip
    line = front(points)
    fig.add_trace(
        go.Scatter(
            x=[p.latency_ms for p in line], y=[second_value(p, axis) for p in line],
            mode="lines", name="Pareto front", line={"dash": "dot", "color": "#444"},
            line_shape="hv",
        )
    )  # fmt: skip
    for p in points:
        if p.role:
            fig.add_annotation(x=p.latency_ms, y=second_value(p, axis), text=p.role, ax=30, ay=-30)
    x_title, y_title = pareto_axes(advice)
    fig.update_layout(
        title=pareto_title(advice),
        xaxis={"title": x_title, "type": "log"}, yaxis={"title": y_title}, height=460,
    )  # fmt: skip
    return fig


def advice_section(answers: list[Advice], figs: Figures) -> list[dict[str, Any]]:
    """Each answer as the template shows it: headline, lines, table and figure."""
    return [
        {
            "id": a.id,
            "model": a.model,
            "headline": headline(a),
            "recommended": a.recommended is not None,
            "lines": lines(a),
            "header": header(a),
            "rows": [row(e, a) for e in a.entries],
            "plot": figs.add(pareto_figure(a), note="no cell has both figures"),
        }
        for a in answers
    ]
