"""Publication figures with matplotlib, each as PNG (200 dpi) and PDF.

Figure objects are built directly (no pyplot): nothing touches global backend state, so
this is safe inside a test process or a notebook with its own backend.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    LogLocator,
    NullFormatter,
    NullLocator,
    ScalarFormatter,
)

from stackcost.backends import BASELINE
from stackcost.profile.breakdown import CPU_PARTS, GPU_PARTS
from stackcost.report import data, pareto
from stackcost.report.costs.breakdown import PART_COLORS, REMAINDER_COLOR
from stackcost.report.costs.energy import energy_points
from stackcost.report.costs.roofline import rep_intensity, roofs
from stackcost.report.costs.rows import Row, collect
from stackcost.report.costs.scaling import SCALING_AXES, UNSTABLE_BASE, scaling_frame
from stackcost.report.style import AXIS_FILE, AXIS_LABEL, X_NAME, series_colors, slug
from stackcost.store.runs import RunResult

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
    ("sizes", "median_ms", "band_low_ms", "band_high_ms", True, "latency"),  # each size axis
    ("batch_size", "peak_rss_mib", None, None, False, "memory"),
)


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
    title = f"ratio to {_plain(baseline)} (geometric mean over workloads; below 1 is better)"
    left_out = len(data.over_untrusted_base(ratio_df, baseline))
    if left_out:  # never silently: say how many ratios an unstable baseline removed
        title += f"\n{left_out} cell(s) left out: {_plain(baseline)} was unstable on their workload"
    fig.suptitle(title)
    return fig


def write_figures(
    runs: list[RunResult], out_dir: str | Path, baseline: str = BASELINE
) -> list[Path]:
    """Write every figure the data supports; a sweep axis with one value gets no figure."""
    from stackcost.report.generate_figures import (
        generate_figures,
        generate_figures_aside,
        generate_only,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    generated = [p for stem, fig in generate_figures(runs) for p in _save(fig, out, stem, used)]
    # A decoder's quantized generate cells (TPOT p50) against the quality they lost.
    decoding = data.summary(generate_only(runs), baseline)
    if data.has_quantized(decoding):
        colors = series_colors(data.series_order(decoding, baseline))
        generated += _pareto_figures(decoding, colors, out, used)
    summ = data.summary(generate_figures_aside(runs), baseline)
    if summ.empty:
        return generated
    colors = series_colors(data.series_order(summ, baseline))
    paths: list[Path] = generated
    sweep_figures = [
        (x, *rest)
        for axis, *rest in SWEEP_FIGURES
        for x in (data.size_columns(summ) if axis == "sizes" else [axis])
    ]
    for x, col, low, high, log_y, stem in sweep_figures:
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
    paths += _pareto_figures(summ, colors, out, used)
    paths += _cost_figures(runs, summ, colors, out, used)
    return paths


def _pareto_figures(
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
        paths += _save(fig, out, f"quant_pareto-{slug(model)}", used)
    return paths


# -- quantized precisions ------------------------------------------------------------------

_PRECISION_MARKERS = {"int8-dyn": "o", "int8": "s", "w8": "D", "w4": "^"}
_SLOWER = "#D62728"


def _pareto_fig(
    model: str, panels: list[pareto.Panel], colors: dict[str, str], left_out: str = ""
) -> Figure:
    """Speedup over fp32 against quality lost, a panel per held workload: one point per
    rung × precision, the Pareto front from the fp32 reference (1×, nothing lost), and the
    side below 1× shaded as slower than fp32. Hollow: over an fp32 cell that is not ok."""
    rows, cols = _grid(len(panels))
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
        ax.set_title(_plain(p.condition or p.model), fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.legend(
        list(handles.values()),
        [_plain(s) for s in handles],
        loc="outside lower center",
        ncols=min(len(handles), 3),
        frameon=False,
    )
    title = (
        f"{model}: speedup over fp32 vs quality lost (Pareto)\n"
        "red rim: slower than fp32; hollow: over an fp32 cell that is not ok"
    )
    if left_out:
        title += "\n" + textwrap.fill(left_out, 95)
    fig.suptitle(_plain(title), fontsize=10)
    return fig


# -- "where the time goes" (--profile) -------------------------------------------------

_POINT_MARKERS = ("o", "D", "s", "^", "*", "P")


def _breakdown_fig(rows: list[Row]) -> Figure | None:
    shown = [r for r in rows if r.rep.breakdown is not None]
    if not shown:
        return None
    known = [*CPU_PARTS, *GPU_PARTS]
    seen = list(dict.fromkeys(k for r in shown for k in r.rep.breakdown.parts_ms))
    parts = [p for p in known if p in seen] + [p for p in seen if p not in known]
    fig = Figure(figsize=(max(6.0, 0.75 * len(shown) + 2.5), 4.4), layout="constrained")
    ax = fig.subplots()
    xs = np.arange(len(shown))
    pos = np.zeros(len(shown))
    neg = np.zeros(len(shown))
    for part in [*parts, None]:
        ys = np.array(
            [
                (
                    r.rep.breakdown.remainder_ms
                    if part is None
                    else r.rep.breakdown.parts_ms.get(part)
                )
                or 0.0
                for r in shown
            ]
        )
        base = np.where(ys >= 0, pos, neg)
        ax.bar(
            xs,
            ys,
            0.7,
            bottom=base,
            color=REMAINDER_COLOR if part is None else PART_COLORS.get(part, "#7f7f7f"),
            hatch="//" if part is None else None,
            edgecolor="#555" if part is None else "none",
            linewidth=0.5,
            label="remainder (not seen by the profiler)" if part is None else _plain(part),
        )
        pos += np.where(ys >= 0, ys, 0)
        neg += np.where(ys < 0, ys, 0)
    ref = [(i, r.rep.breakdown.unprofiled_wall_ms) for i, r in enumerate(shown)]
    ref = [(i, v) for i, v in ref if v is not None]
    if ref:
        ax.scatter(
            [i for i, _ in ref],
            [v for _, v in ref],
            marker="_",
            s=500,
            color="#000",
            linewidths=2,
            zorder=3,
            label="unprofiled wall",
        )
    ax.set_xticks(xs, [_plain(r.series) for r in shown], rotation=30, ha="right", fontsize=8)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(shown):
        groups.setdefault(r.workload, []).append(i)
    for workload, idx in groups.items():
        ax.annotate(
            _plain(workload),
            xy=(np.mean(idx), 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=7,
            color="#444",
        )
        if idx[0] > 0:
            ax.axvline(idx[0] - 0.5, color="#bbb", linewidth=0.8)
    ax.set_ylabel("time per iteration (ms)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    fig.suptitle("where the time goes: one iteration (one batch) of the profiled pass")
    return fig


def _roofline_fig(rows: list[Row], colors: dict[str, str]) -> Figure | None:
    pts = [r for r in rows if rep_intensity(r.rep) and (r.rep.achieved_gflops or 0) > 0]
    if not pts:
        return None
    machine_roofs = roofs(pts)
    intens = [rep_intensity(r.rep) for r in pts]
    ridges = [rf.peak_gflops / rf.stream_gbs for rf in machine_roofs]
    lo, hi = min([*intens, *ridges]) / 4, max([*intens, *ridges]) * 4
    fig = Figure(figsize=(7.0, 4.6), layout="constrained")
    ax = fig.subplots()
    many_runs = len({run for rf in machine_roofs for run in rf.runs}) > 1
    styles = ("-", "--", ":", "-.")
    for i, rf in enumerate(machine_roofs):
        xs, ys = rf.points(lo, hi)
        ax.plot(
            xs, ys, styles[i % len(styles)], color="#444", lw=1.2, label=_plain(rf.label(many_runs))
        )
    threads = sorted({r.cell.threads for r in pts})
    for series, t in dict.fromkeys((r.series, r.cell.threads) for r in pts):
        part = [r for r in pts if r.series == series and r.cell.threads == t]
        ax.scatter(
            [rep_intensity(r.rep) for r in part],
            [r.rep.achieved_gflops for r in part],
            color=colors.get(series, "#333"),
            marker=_POINT_MARKERS[threads.index(t) % len(_POINT_MARKERS)],
            s=40,
            alpha=0.85,
            label=_plain(f"{series} · {t} thr" if len(threads) > 1 else series),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # 1-2-5 ticks, plain numbers: no '2×10⁰' clutter
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOP/byte; bytes ESTIMATED, operator-level)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    fig.suptitle("roofline under the measured peaks (bytes ESTIMATED)")
    return fig


def _energy_fig(rows: list[Row], colors: dict[str, str]) -> Figure | None:
    from stackcost.measure.energy import fit_power_throughput

    df = energy_points(rows)
    if df.empty or df["throughput"].isna().all():
        return None
    df = df[df["throughput"].notna()]
    fig = Figure(figsize=(7.0, 4.4), layout="constrained")
    ax = fig.subplots()
    for group, part in df.groupby("group", sort=False):
        color = colors.get(part["series"].iloc[0], "#333")
        measured = part["method"].iloc[0] == "measured"
        ax.scatter(
            part["throughput"],
            part["watts"],
            s=40,
            facecolors=color if measured else "none",
            edgecolors=color,
            label=_plain(group),
        )
        pts = list(zip(part["throughput"], part["watts"], strict=True))
        if len({p[0] for p in pts}) >= 2:
            slope, intercept, r2 = fit_power_throughput(pts)
            x = np.array([min(p[0] for p in pts), max(p[0] for p in pts)])
            ax.plot(
                x,
                intercept + slope * x,
                "-" if measured else "--",
                color=color,
                label=_plain(f"{group} fit, R² = {r2:.3f}"),
            )
    methods = sorted(df["method"].unique())
    label = (
        "ESTIMATED (power model)"
        if methods == ["estimated"]
        else "measured"
        if methods == ["measured"]
        else "measured and ESTIMATED (separate series)"
    )
    ax.set_xlabel("throughput (samples/s)")
    ax.set_ylabel("power (W)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"power against throughput: {label}")
    return fig


def _scaling_fig(summ: pd.DataFrame, colors: dict[str, str]) -> Figure | None:
    df = scaling_frame(summ)
    if df.empty:
        return None
    keys = list(dict.fromkeys(df[list(SCALING_AXES)].itertuples(index=False, name=None)))
    rows, cols = _grid(len(keys))
    fig = Figure(figsize=(4.2 * cols, 3.3 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    handles: dict[str, object] = {}
    for ax, key in zip(axes, keys, strict=False):
        sel = df[[k == key for k in df[list(SCALING_AXES)].itertuples(index=False, name=None)]]
        ts = sorted(int(t) for t in sel["threads"].unique())
        for base in sorted(sel["base_threads"].unique()):
            (line,) = ax.plot(ts, [t / base for t in ts], "--", color="#888", label="ideal")
            handles.setdefault("ideal (linear)", line)
        for series, s in sel.groupby("series", sort=False):
            trusted = bool(s["base_trusted"].all())  # dotted: over an unstable base
            (line,) = ax.plot(
                s["threads"],
                s["speedup"],
                marker="o",
                ms=3.5,
                color=colors.get(series, "#333"),
                linestyle="-" if trusted else ":",
            )
            handles.setdefault(series if trusted else f"{series} {UNSTABLE_BASE}", line)
        _log2_x(ax, ts, "intra-op threads")
        row = dict(zip(SCALING_AXES, key, strict=True))
        ax.set_title(
            _plain(
                " · ".join(filter(None, [row["model"], f"batch {row['batch_size']}", row["sizes"]]))
            ),
            fontsize=9,
        )
        ax.set_ylabel("speedup (×)")
        ax.grid(True, alpha=0.3)
    for ax in axes[len(keys) :]:
        ax.set_visible(False)
    fig.legend(
        list(handles.values()),
        [_plain(s) for s in handles],
        loc="outside lower center",
        ncols=min(len(handles), 5),
        frameon=False,
    )
    fig.suptitle("thread scaling: speedup over the smallest thread count")
    return fig


def _cost_figures(
    runs: list[RunResult], summ: pd.DataFrame, colors: dict[str, str], out: Path, used: set[str]
) -> list[Path]:
    """The "where the time goes" figures the data supports (profiled runs, thread sweeps)."""
    rows = collect(runs, summ)
    paths: list[Path] = []
    for stem, fig in (
        ("breakdown", _breakdown_fig(rows)),
        ("roofline", _roofline_fig(rows, colors)),
        ("power_vs_throughput", _energy_fig(rows, colors)),
        ("thread_scaling", _scaling_fig(summ, colors)),
    ):
        if fig is not None:
            paths += _save(fig, out, stem, used)
    return paths
