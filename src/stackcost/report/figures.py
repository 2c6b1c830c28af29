"""Publication figures with matplotlib, each as PNG (200 dpi) and PDF.

Figure objects are built directly (no pyplot): nothing touches global backend state, so
this is safe inside a test process or a notebook with its own backend.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    NullFormatter,
    NullLocator,
    ScalarFormatter,
)

from stackcost.report import data
from stackcost.report.style import AXIS_LABEL, X_NAME, series_colors, slug
from stackcost.runs import RunResult

DPI = 200
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
    ("resolution", "median_ms", "band_low_ms", "band_high_ms", True, "latency"),
    ("batch_size", "peak_rss_mib", None, None, False, "memory"),
)
AXIS_FILE = {"batch_size": "batch", "resolution": "resolution"}


def _plain(text: object) -> str:
    """Matplotlib reads '$...$' as math; a model name must stay literal."""
    return str(text).replace("$", r"\$")


def _log2_x(ax, values: list[int], label: str) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(values))))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(f"{label}, log₂ scale")


def _grid(n: int) -> tuple[int, int]:
    cols = min(3, n)
    return math.ceil(n / cols), cols


def _save(fig: Figure, out_dir: Path, stem: str, used: set[str]) -> list[Path]:
    name, i = stem, 2
    while name in used:  # two model names can share a slug
        name, i = f"{stem}-{i}", i + 1
    used.add(name)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=DPI)
    # The layout is solved; freezing it halves the cost of the second format.
    fig.set_layout_engine("none")
    fig.savefig(paths[1])
    return paths


def _sweep_figure(
    sweeps: list[data.Sweep],
    x: str,
    col: str,
    low: str | None,
    high: str | None,
    log_y: bool,
    colors: dict[str, str],
    title: str,
    ylabel: str,
) -> Figure:
    rows, cols = _grid(len(sweeps))
    fig = Figure(figsize=(4.2 * cols, 3.3 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    handles: dict[str, object] = {}
    for ax, sweep in zip(axes, sweeps, strict=False):
        df = sweep.cells.assign(peak_rss_mib=sweep.cells["peak_rss_bytes"] / data.MIB)
        for series, s in df.groupby("series", sort=False):
            s = s.dropna(subset=[col])
            if s.empty:
                continue
            color = colors[series]
            if low and high:
                ax.fill_between(s[x], s[low], s[high], color=color, alpha=0.2, linewidth=0)
            (line,) = ax.plot(s[x], s[col], marker="o", ms=3.5, color=color, label=series)
            handles.setdefault(series, line)
        _log2_x(ax, [int(v) for v in sweep.cells[x]], AXIS_LABEL[x])
        if log_y:
            ax.set_yscale("log")
            plain = FuncFormatter(lambda v, _: f"{v:g}")  # '3', not '3×10⁰'
            ax.yaxis.set_major_formatter(plain)
            lo, hi = ax.get_ylim()
            # Label minor ticks only when the axis spans too few decades to have majors.
            ax.yaxis.set_minor_formatter(plain if hi / lo < 30 else NullFormatter())
        ax.set_ylabel(ylabel)
        ax.set_title(_plain(sweep.condition or sweep.model), fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[len(sweeps) :]:
        ax.set_visible(False)
    fig.legend(
        list(handles.values()),
        [_plain(s) for s in handles],
        loc="outside lower center",
        ncols=min(len(handles), 5),
        frameon=False,
    )
    fig.suptitle(_plain(title))
    return fig


def _ratio_figure(ratio_df: pd.DataFrame, colors: dict[str, str], baseline: str) -> Figure | None:
    summ = data.ratio_summary(ratio_df, baseline)
    if summ.empty or summ["geomean"].notna().sum() == 0:
        return None
    models = list(dict.fromkeys(summ["model"]))
    series = list(dict.fromkeys(summ["series"]))
    fig = Figure(figsize=(max(9.0, 1.2 * len(models) * 3), 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    width = 0.8 / len(series)
    for ax, (metric, title) in zip(axes, data.RATIO_METRICS.items(), strict=True):
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
                label=_plain(name),
                error_kw={"linewidth": 0.8},
            )
        ax.axhline(1.0, color="#333", linestyle="--", linewidth=1)
        ax.set_xticks(np.arange(len(models)), [_plain(m) for m in models], rotation=20, ha="right")
        ax.set_ylabel(f"ratio to {_plain(baseline)} (×)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="outside lower center", ncols=min(len(labels), 5), frameon=False
    )
    fig.suptitle(f"ratio to {_plain(baseline)} (geometric mean over workloads; below 1 is better)")
    return fig


def write_figures(
    runs: list[RunResult], out_dir: str | Path, baseline: str = "eager"
) -> list[Path]:
    """Write every figure the data supports; a sweep axis with one value gets no figure."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summ = data.summary(runs, baseline)
    if summ.empty:
        return []
    colors = series_colors(data.series_order(summ, baseline))
    paths: list[Path] = []
    used: set[str] = set()
    for x, col, low, high, log_y, stem in SWEEP_FIGURES:
        by_model: dict[str, list[data.Sweep]] = {}
        for sweep in data.sweeps(summ, x):
            by_model.setdefault(sweep.model, []).append(sweep)
        ylabel = AXIS_LABEL[col]
        for model, sweeps in by_model.items():
            title = f"{model}: {stem} vs {X_NAME[x]}"
            fig = _sweep_figure(sweeps, x, col, low, high, log_y, colors, title, ylabel)
            paths += _save(fig, out, f"{stem}_vs_{AXIS_FILE[x]}-{slug(model)}", used)
    fig = _ratio_figure(summ, colors, baseline)
    if fig is not None:
        paths += _save(fig, out, f"ratio_to_{slug(baseline)}", used)
    return paths
