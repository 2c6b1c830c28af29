"""The "where the time goes" publication figures (frames/costs.py): the breakdown of one
iteration, the roofline, power against throughput, and thread scaling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from stackcost.profile.breakdown import CPU_PARTS, GPU_PARTS
from stackcost.report.figures.layout import finish_panels, grid, log2_x, plain, save
from stackcost.report.frames.costs import (
    SCALING_AXES,
    UNSTABLE_BASE,
    Row,
    collect,
    energy_points,
    rep_intensity,
    roofs,
    scaling_frame,
)
from stackcost.report.style import PART_COLORS, REMAINDER_COLOR
from stackcost.store.runs import RunResult

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
            label="remainder (not seen by the profiler)" if part is None else plain(part),
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
    ax.set_xticks(xs, [plain(r.series) for r in shown], rotation=30, ha="right", fontsize=8)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(shown):
        groups.setdefault(r.workload, []).append(i)
    for workload, idx in groups.items():
        ax.annotate(
            plain(workload),
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
            xs, ys, styles[i % len(styles)], color="#444", lw=1.2, label=plain(rf.label(many_runs))
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
            label=plain(f"{series} · {t} thr" if len(threads) > 1 else series),
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
            label=plain(group),
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
                label=plain(f"{group} fit, R² = {r2:.3f}"),
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
    rows, cols = grid(len(keys))
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
        log2_x(ax, ts, "intra-op threads")
        row = dict(zip(SCALING_AXES, key, strict=True))
        ax.set_title(
            plain(
                " · ".join(filter(None, [row["model"], f"batch {row['batch_size']}", row["sizes"]]))
            ),
            fontsize=9,
        )
        ax.set_ylabel("speedup (×)")
        ax.grid(True, alpha=0.3)
    finish_panels(fig, axes, len(keys), handles)
    fig.suptitle("thread scaling: speedup over the smallest thread count")
    return fig


def cost_figures(
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
            paths += save(fig, out, stem, used)
    return paths
