"""The quantized precisions' publication figures: per model, speedup over fp32 against the
quality lost, with the Pareto front (frames/pareto.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from stackcost.report.figures.layout import finish_panels, grid, plain, save
from stackcost.report.frames import pareto
from stackcost.report.style import slug


def pareto_figures(
    summ: pd.DataFrame, colors: dict[str, str], out: Path, used: set[str]
) -> list[Path]:
    """quant_pareto-MODEL: one figure per model with a quantized point."""
    by_model: dict[str, list[pareto.Panel]] = {}
    for panel in pareto.panels(summ):
        by_model.setdefault(panel.model, []).append(panel)
    paths: list[Path] = []
    for model, panels in by_model.items():
        left_out = pareto.note(summ[summ["model"] == model])  # never silently: say what's missing
        fig = _pareto_fig(model, panels, colors, left_out)
        paths += save(fig, out, f"quant_pareto-{slug(model)}", used)
    return paths


_PRECISION_MARKERS = {"int8-dyn": "o", "int8": "s", "w8": "D", "w4": "^"}


_SLOWER = "#D62728"


def _pareto_fig(
    model: str, panels: list[pareto.Panel], colors: dict[str, str], left_out: str = ""
) -> Figure:
    """Speedup over fp32 against quality lost, a panel per held workload: one point per
    rung × precision, the Pareto front from the fp32 reference (1×, nothing lost), and the
    side below 1× shaded as slower than fp32. Hollow: over an fp32 cell that is not ok."""
    rows, cols = grid(len(panels))
    fig = Figure(figsize=(max(7.5, 4.6 * cols), 3.6 * rows + 1.2), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    handles: dict[str, object] = {}
    top = max(max(float(p.points["speedup"].max()) for p in panels) * 1.15, 2.0)
    for ax, p in zip(axes, panels, strict=False):
        ax.axvspan(0, 1, color=_SLOWER, alpha=0.08, linewidth=0)
        ax.text(
            0.02,
            0.97,
            pareto.SLOWER_SIDE,
            transform=ax.transAxes,
            color=_SLOWER,
            va="top",
            fontsize=8,
        )
        ax.axvline(1.0, color="#444", linestyle="--", linewidth=1)
        xs, ys = pareto.front_line(p)
        (line,) = ax.step(xs, ys, where="pre", color="#444", linestyle=":", linewidth=1.2)
        handles.setdefault("Pareto front", line)
        ref = ax.scatter([1.0], [0.0], marker="*", s=120, color="#000", zorder=4)
        handles.setdefault(pareto.REFERENCE, ref)
        for r in p.points.itertuples(index=False):
            color = colors.get(r.series, "#333")
            point = ax.scatter(
                [r.speedup],
                [r.drop],
                marker=_PRECISION_MARKERS.get(r.precision, "o"),
                s=60,
                facecolors=color if r.trusted else "none",
                edgecolors=_SLOWER if r.slower else color,
                linewidths=2.2 if r.slower else 1.0,
                zorder=5,
            )
            handles.setdefault(f"{r.series} · {r.precision}", point)
        ax.set_xlim(0, top)
        ax.set_xlabel("speedup over the same rung's fp32 (×)")
        ax.set_ylabel(pareto.Y_LABEL[p.metric])
        ax.set_title(plain(p.condition or p.model), fontsize=9)
        ax.grid(True, alpha=0.3)
    finish_panels(fig, axes, len(panels), handles, ncols=3)
    title = (
        f"{model}: speedup over fp32 vs quality lost (Pareto)\n"
        "red rim: slower than fp32; hollow: over an fp32 cell that is not ok"
    )
    if left_out:
        title += "\n" + textwrap.fill(left_out, 95)
    fig.suptitle(plain(title), fontsize=10)
    return fig
