"""The timed loop's publication figures: latency, throughput and memory against the batch
size and each size axis, per model, and each backend's ratios to the baseline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from stackcost.report.figures.layout import finish_panels, grid, log2_x, plain, save
from stackcost.report.frames import tidy
from stackcost.report.style import AXIS_FILE, AXIS_LABEL, X_NAME, slug

# (metric column, band low, band high, y label, log y, file stem)
SWEEP_FIGURES = (
    ("batch_size", "median_ms", "band_low_ms", "band_high_ms", True, "latency"),
    (
        "batch_size",
        "throughput_per_s",
        "throughput_low_per_s",
        "throughput_high_per_s",
        False,
        "throughput",
    ),
    ("sizes", "median_ms", "band_low_ms", "band_high_ms", True, "latency"),  # each size axis
    ("batch_size", "peak_rss_mib", None, None, False, "memory"),
)


def _sweep_figure(
    sweeps: list[tidy.Sweep],
    x: str,
    col: str,
    low: str | None,
    high: str | None,
    log_y: bool,
    colors: dict[str, str],
    title: str,
    ylabel: str,
) -> Figure:
    rows, cols = grid(len(sweeps))
    fig = Figure(figsize=(4.2 * cols, 3.3 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    handles: dict[str, object] = {}
    for ax, sweep in zip(axes, sweeps, strict=False):
        df = sweep.cells.assign(peak_rss_mib=sweep.cells["peak_rss_bytes"] / tidy.MIB)
        for series, s in df.groupby("series", sort=False):
            s = s.dropna(subset=[col])
            if s.empty:
                continue
            color = colors[series]
            if low and high:
                ax.fill_between(s[x], s[low], s[high], color=color, alpha=0.2, linewidth=0)
            (line,) = ax.plot(s[x], s[col], marker="o", ms=3.5, color=color, label=series)
            handles.setdefault(series, line)
        log2_x(ax, [int(v) for v in sweep.cells[x]], AXIS_LABEL[x])
        if log_y:
            ax.set_yscale("log")
            ticks = FuncFormatter(lambda v, _: f"{v:g}")  # '3', not '3×10⁰'
            ax.yaxis.set_major_formatter(ticks)
            lo, hi = ax.get_ylim()
            # Label minor ticks only when the axis spans too few decades to have majors.
            ax.yaxis.set_minor_formatter(ticks if hi / lo < 30 else NullFormatter())
        ax.set_ylabel(ylabel)
        ax.set_title(plain(sweep.condition or sweep.model), fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    finish_panels(fig, axes, len(sweeps), handles)
    fig.suptitle(plain(title))
    return fig


def _ratio_figure(ratio_df: pd.DataFrame, colors: dict[str, str], baseline: str) -> Figure | None:
    summ = tidy.ratio_summary(ratio_df, baseline)
    if summ.empty or summ["geomean"].notna().sum() == 0:
        return None
    models = list(dict.fromkeys(summ["model"]))
    series = list(dict.fromkeys(summ["series"]))
    fig = Figure(figsize=(max(9.0, 1.2 * len(models) * 3), 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    width = 0.8 / len(series)
    for ax, (metric, title) in zip(axes, tidy.RATIO_METRICS.items(), strict=True):
        part = summ[summ["metric"] == metric]
        if part["geomean"].isna().all():
            ax.text(
                0.5,
                0.5,
                "no device memory on CPU",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="#666",
            )
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(title, fontsize=10)
            continue
        for i, name in enumerate(series):
            s = part[part["series"] == name].set_index("model").reindex(models)
            xs = np.arange(len(models)) + (i - (len(series) - 1) / 2) * width
            err = np.vstack(
                [(s["geomean"] - s["low"]).fillna(0), (s["high"] - s["geomean"]).fillna(0)]
            )
            ax.bar(
                xs,
                s["geomean"],
                width,
                yerr=err,
                capsize=2,
                color=colors[name],
                label=plain(name),
                error_kw={"linewidth": 0.8},
            )
        ax.axhline(1.0, color="#333", linestyle="--", linewidth=1)
        ax.set_xticks(np.arange(len(models)), [plain(m) for m in models], rotation=20, ha="right")
        ax.set_ylabel(f"ratio to {plain(baseline)} (×)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="outside lower center", ncols=min(len(labels), 5), frameon=False
    )
    title = f"ratio to {plain(baseline)} (geometric mean over workloads; below 1 is better)"
    left_out = len(tidy.over_untrusted_base(ratio_df, baseline))
    if left_out:  # never silently: say how many ratios an unstable baseline removed
        title += f"\n{left_out} cell(s) left out: {plain(baseline)} was unstable on their workload"
    fig.suptitle(title)
    return fig


def run_figures(
    summ: pd.DataFrame, colors: dict[str, str], baseline: str, out: Path, used: set[str]
) -> list[Path]:
    """The sweeps per model and axis (one value on an axis: no figure), then the ratios."""
    paths: list[Path] = []
    sweep_figures = [
        (x, *rest)
        for axis, *rest in SWEEP_FIGURES
        for x in (tidy.size_columns(summ) if axis == "sizes" else [axis])
    ]
    for x, col, low, high, log_y, stem in sweep_figures:
        by_model: dict[str, list[tidy.Sweep]] = {}
        for sweep in tidy.sweeps(summ, x):
            by_model.setdefault(sweep.model, []).append(sweep)
        ylabel = AXIS_LABEL[col]
        for model, sweeps in by_model.items():
            title = f"{model}: {stem} vs {X_NAME[x]}"
            fig = _sweep_figure(sweeps, x, col, low, high, log_y, colors, title, ylabel)
            paths += save(fig, out, f"{stem}_vs_{AXIS_FILE[x]}-{slug(model)}", used)
    fig = _ratio_figure(summ, colors, baseline)
    if fig is not None:
        paths += save(fig, out, f"ratio_to_{slug(baseline)}", used)
    return paths
