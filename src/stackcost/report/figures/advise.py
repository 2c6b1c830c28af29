"""advise's Pareto figure for print: the measured cells' latency against quality lost (or
peak RSS without a quality bound), as the HTML report draws it (frames/advise.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from stackcost.advise.advice import Advice
from stackcost.report.figures.layout import plain, save
from stackcost.report.frames.advise import (
    front,
    pareto_axes,
    pareto_points,
    pareto_title,
    second_axis,
    second_value,
)
from stackcost.report.style import series_colors, slug

_MARKERS = {"fp32": "o", "int8-dyn": "D", "int8": "s", "w8": "D", "w4": "^"}
_ROLES = {"recommended": "*", "runner-up": "o"}  # drawn over the cell's own marker


def advice_figure(advice: Advice) -> Figure | None:
    """One point per measured cell, coloured by rung, shaped by precision, sized by peak
    RSS; the recommended cell starred and the runner-up ringed, each named in the key. None when no cell has both
    figures."""
    axis = second_axis(advice)
    points = [p for p in pareto_points(advice) if second_value(p, axis) is not None]
    if not points:
        return None
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.subplots()
    colors = series_colors(p.backend for p in points)
    biggest = max((p.memory_mib or 0.0) for p in points) or 1.0
    for rung, color in colors.items():
        for precision in dict.fromkeys(p.precision for p in points if p.backend == rung):
            mine = [p for p in points if (p.backend, p.precision) == (rung, precision)]
            ax.scatter(
                [p.latency_ms for p in mine],
                [second_value(p, axis) for p in mine],
                s=[30 + 220 * (p.memory_mib or 0.0) / biggest for p in mine],
                marker=_MARKERS.get(precision, "o"),
                color=color,
                alpha=0.8,
                edgecolors=color,
                linewidths=0.5,
                label=plain(f"{rung} · {precision}"),
                zorder=4,
            )
    line = front(points)
    ax.step(
        [p.latency_ms for p in line],
        [second_value(p, axis) for p in line],
        where="post",
        color="#444",
        linestyle=":",
        linewidth=1.2,
        label="Pareto front",
    )
    # The named cells are often neighbours: a mark over each, named in the key.
    for role, marker in _ROLES.items():
        for p in (p for p in points if p.role == role):
            ax.scatter(
                [p.latency_ms],
                [second_value(p, axis)],
                marker=marker,
                s=90,
                facecolors="#000" if marker == "*" else "none",
                edgecolors="#000",
                linewidths=1.4,
                label=plain(f"{role}: {p.label}"),
                zorder=6,
            )
    x_title, y_title = pareto_axes(advice)
    ax.set_xscale("log")
    plain_number = FuncFormatter(lambda v, _: f"{v:g}")  # 3, 20, 0.1: not 3×10⁰
    ax.xaxis.set_major_formatter(plain_number)
    # Within a decade the minor ticks are the only ones, so they are labelled too.
    latencies = [p.latency_ms for p in points]
    narrow = max(latencies) < 10 * min(latencies)
    ax.xaxis.set_minor_formatter(plain_number if narrow else NullFormatter())
    ax.set_xlabel(plain(f"{x_title}, log scale"))
    ax.set_ylabel(plain(textwrap.fill(y_title, 45)))
    ax.grid(True, alpha=0.3)
    legend = fig.legend(loc="outside lower center", ncols=3, fontsize=7, frameon=False)
    for handle in legend.legend_handles:  # one size in the key: the size is memory's
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([40])
    fig.suptitle(plain(textwrap.fill(pareto_title(advice), 90)), fontsize=9)
    return fig


def advice_figures(advice: Advice, out: Path, stem: str = "") -> list[Path]:
    """The figure as PNG and PDF in `out`, named `stem` (default advise_pareto-MODEL);
    nothing when no cell has both figures."""
    fig = advice_figure(advice)
    if fig is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    return save(fig, out, stem or f"advise_pareto-{slug(advice.model)}", set())
