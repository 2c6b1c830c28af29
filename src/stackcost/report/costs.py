"""The "where the time goes" section of the HTML report, for runs made with `--profile`.

Per profiled cell: the per-iteration breakdown (kernels, overhead, ... and the remainder
the profiler's timeline did not see), the top operators, the cell on a roofline under the
machine's measured peaks, its share of that peak, how many cores it kept busy, and its
power against its throughput. Plus thread scaling, from any run whose workloads were
measured at several thread counts (no profile needed).

Only valid cells ("ok" or "unstable") are drawn: a "wrong" cell's time is not a time.
Every builder returns a Panel whose figure is None, with a note saying why, when there is
nothing honest to draw. Strings from the store reach plotly entity-escaped (plotly reads
labels as HTML); the tables get raw strings, which Jinja escapes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from pydantic import ValidationError

from stackcost.cell import Cell
from stackcost.measure.peaks import Peaks, percent_of_peak
from stackcost.measure.telemetry import Telemetry
from stackcost.profile.breakdown import CPU_PARTS, GPU_PARTS
from stackcost.report import data
from stackcost.report.plots import HEIGHT, TEMPLATE, _extra, _log2_axis, _selector, _text
from stackcost.report.profile_table import profiled
from stackcost.report.style import PALETTE
from stackcost.report.units import num
from stackcost.result import RepetitionResult
from stackcost.runs import RunResult

PART_COLORS = {
    "graph frames (ops not recorded)": "#CC79A7",
    "kernels": "#0072B2",
    "overhead": "#E69F00",
    "device compute": "#009E73",
    "host<->device copies": "#D55E00",
    "idle": "#CC79A7",
}
REMAINDER_COLOR = "#9e9e9e"
BUSY_COLOR = "#D62728"
ROOF_DASH = ("solid", "dash", "dot", "dashdot", "longdash")
POINT_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "star", "cross")
TOP_OPS_IN_HOVER = 3
Y_MS = "time per iteration (ms)"
Y_PCT = "share of the profiled wall (%)"
BYTES_CAVEAT = (
    "Bytes are ESTIMATED (operator-level traffic): every operator is assumed to read its "
    "tensor inputs and write its outputs once, with no cache reuse modelled, so the "
    "intensity is a model, not a measurement (a point above the slanted roof usually means "
    "the estimate counts traffic that really came from cache). FLOPs count matmul- and convolution-like "
    "ops only (torch FlopCounterMode, 2 per multiply-add), for every backend alike."
)
NO_PROFILE = (
    "No cell of these runs carries profile data: run with `stackcost run ... --profile` for "
    "the breakdown, top operators, roofline, utilization and energy."
)


@dataclass
class Panel:
    """One figure of the section: the figure, or None and a note saying why not.

    `note` is shown under the figure (or in its place); `notes` are per-cell remarks
    listed under it (what could not be profiled, busy machines, missing fits).
    """

    fig: go.Figure | None
    note: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Row:
    """One valid profiled cell: the repetition carrying its profile, and its context."""

    run_id: str
    cell: Cell
    series: str  # the legend name the rest of the report uses (raw, not escaped)
    workload: str  # model · batch · sizes (with units) · threads (+ axes that vary), raw
    rep: RepetitionResult
    peaks: Peaks | None  # measured at the cell's thread count, from the run's env
    median_ms: float | None = None  # median over repetitions, as in the other sections
    throughput: float | None = None  # samples/s, median over repetitions

    @property
    def label(self) -> str:
        return f"{self.series} · {self.workload}"

    @property
    def peak_gflops(self) -> float | None:
        if self.peaks is None:
            return None
        return {"fp32": self.peaks.fp32_gflops, "bf16": self.peaks.bf16_gflops}.get(
            self.cell.precision
        )

    @property
    def percent_of_peak(self) -> float | None:
        if self.rep.achieved_gflops is None or self.peaks is None:
            return None
        return percent_of_peak(self.rep.achieved_gflops, self.peaks, self.cell.precision)


# -- data ------------------------------------------------------------------------------


def run_peaks(run: RunResult) -> dict[int, Peaks]:
    """The run's measured peaks by thread count; an unreadable entry is left out."""
    out: dict[int, Peaks] = {}
    for key, value in ((run.env or {}).get("peaks") or {}).items():
        try:
            p = Peaks.model_validate(value)
            out[int(key)] = p
        except (ValidationError, ValueError, TypeError):
            continue
    return out


_EXTRA_AXES = {
    "mode": "{}",
    "precision": "{}",
    "device": "{}",
    "init": "init {}",
}


def _workload(cell: Cell, extra: list[str]) -> str:
    sizes = [cell.size_label()] if cell.sizes else []  # "224 px", "128 tokens"
    parts = [cell.model.name, f"b{cell.batch_size}", *sizes, f"{cell.threads} thr"]
    flat = cell.flat()
    parts += [_EXTRA_AXES[a].format(flat[a]) for a in extra]
    return " · ".join(parts)


def _sort_key(row: Row, order: list[str]) -> tuple:
    c = row.cell
    rank = order.index(row.series) if row.series in order else len(order)
    workload = (c.model.name, c.mode, c.precision, c.device, tuple(c.sizes.items()), c.threads)
    return (*workload, c.batch_size, rank, row.run_id)


def collect(runs: list[RunResult], summ: pd.DataFrame | None = None) -> list[Row]:
    """Every valid cell with profile data, sorted by workload then series.

    `summ` is data.summary of the same runs: it supplies the series names (so colours
    match the rest of the report) and the cells' median latency and throughput.
    """
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    order: list[str] = []
    if summ is not None and len(summ):
        for r in summ.to_dict("records"):
            by_key[(r["run_id"], r["cell_key"])] = r
        order = list(dict.fromkeys(summ["series"]))
    found: list[tuple[RunResult, Any, RepetitionResult]] = []
    for run in runs:
        for c in run.cells():
            if not c.valid:
                continue
            rep = profiled(c)
            if rep is not None:
                found.append((run, c, rep))
    extra = [
        a for a in _EXTRA_AXES if len({c.cell.flat()[a] for _, c, _ in found}) > 1
    ]  # only the axes that vary get a place in the label
    peaks = {run.run_id: run_peaks(run) for run in runs}
    rows = []
    for run, c, rep in found:
        s = by_key.get((run.run_id, c.cell.key()), {})
        median = s.get("median_ms")
        tput = s.get("throughput_per_s")
        rows.append(
            Row(
                run_id=run.run_id,
                cell=c.cell,
                series=s.get("series") or c.cell.backend,
                workload=_workload(c.cell, extra),
                rep=rep,
                peaks=peaks[run.run_id].get(c.cell.threads),
                median_ms=None if median is None or pd.isna(median) else float(median),
                throughput=None if tput is None or pd.isna(tput) else float(tput),
            )
        )
    return sorted(rows, key=lambda r: _sort_key(r, order))


def _color(colors: dict[str, str], series: str) -> str:
    return colors.get(series) or PALETTE[sum(map(ord, series)) % len(PALETTE)]


def _x(rows: list[Row]) -> list[list[str]]:
    """A two-level category axis: workload outside, series inside (escaped)."""
    return [[_text(r.workload) for r in rows], [_text(r.series) for r in rows]]


# -- 1. breakdown ----------------------------------------------------------------------


def _top(rep: RepetitionResult, n: int = TOP_OPS_IN_HOVER) -> str:
    b = rep.breakdown
    if b is None or not b.top_ops:
        return "no operator table"
    ops = [f"{_text(o.name)} {o.share:.0%}" for o in b.top_ops[:n]]
    return "top ops: " + ", ".join(ops)


def breakdown_notes(rows: list[Row]) -> list[str]:
    """Per cell: why it has no breakdown, or that its parts miss part of the wall."""
    notes = []
    for r in rows:
        b = r.rep.breakdown
        if b is None:
            why = r.rep.profile_notes or ["no breakdown recorded (no reason given)"]
            notes += [f"{r.label}: {w}" for w in why]
            continue
        if b.unprofiled_wall_ms is not None and b.unprofiled_wall_ms > 1.1 * b.wall_ms:
            notes.append(
                f"{r.label}: the step without the profiler ({b.unprofiled_wall_ms:.4g} ms) "
                f"took longer than with it ({b.wall_ms:.4g} ms): the timings were disturbed "
                "(another process, frequency changes); read the split as shares only"
            )
        if not b.check():
            share = b.remainder_ms / b.wall_ms if b.wall_ms > 0 else math.nan
            notes.append(
                f"{r.label}: the parts account for {b.covered():.0%} of the profiled wall "
                f"(remainder {share:+.0%}): the split is approximate"
            )
    return notes


def breakdown_figure(rows: list[Row], colors: dict[str, str]) -> Panel:
    """Stacked per-iteration parts per backend, grouped by workload; remainder hatched."""
    notes = breakdown_notes(rows)
    shown = [r for r in rows if r.rep.breakdown is not None]
    if not shown:
        return Panel(None, "No profiled cell has a breakdown.", notes)
    known = [*CPU_PARTS, *GPU_PARTS]
    seen = list(dict.fromkeys(k for r in shown for k in r.rep.breakdown.parts_ms))
    parts = [p for p in known if p in seen] + [p for p in seen if p not in known]
    x = _x(shown)
    fig = go.Figure()
    extra_colors = iter(PALETTE[5:])
    y_ms: list[list[float | None]] = []  # per trace: ms per iteration
    y_pct: list[list[float | None]] = []  # per trace: % of the profiled wall

    def pct(ms: float | None, wall: float) -> float | None:
        return None if ms is None or wall <= 0 else 100 * ms / wall

    for part in [*parts, None]:
        ys, custom = [], []
        for r in shown:
            b = r.rep.breakdown
            ms = b.remainder_ms if part is None else b.parts_ms.get(part)
            ys.append(ms)
            share = f"{ms / b.wall_ms:.1%}" if ms is not None and b.wall_ms > 0 else "—"
            custom.append(
                [
                    _top(r.rep),
                    share,
                    f"{b.wall_ms:.4g}",
                    b.iters,
                    _text(r.label),
                    "—" if ms is None else f"{ms:.4g}",
                ]
            )
        y_ms.append(ys)
        y_pct.append([pct(ms, r.rep.breakdown.wall_ms) for ms, r in zip(ys, shown, strict=True)])
        name = "remainder (not seen by the profiler)" if part is None else _text(part)
        marker: dict[str, Any] = {
            "color": REMAINDER_COLOR
            if part is None
            else PART_COLORS.get(part) or next(extra_colors, "#7f7f7f")
        }
        if part is None:
            marker["pattern"] = {"shape": "/", "fgcolor": "#555", "solidity": 0.3}
        fig.add_trace(
            go.Bar(
                x=x,
                y=ys,
                name=name,
                marker=marker,
                customdata=custom,
                hovertemplate="%{customdata[4]}<br>"
                f"{_extra(name)}: %{{customdata[5]}} ms/iter (%{{customdata[1]}} of the "
                "%{customdata[2]} ms wall)<br>%{customdata[0]}"
                "<br>profiled over %{customdata[3]} iterations<extra></extra>",
            )
        )
    ref = [r for r in shown if r.rep.breakdown.unprofiled_wall_ms is not None]
    if ref:
        y_ms.append([r.rep.breakdown.unprofiled_wall_ms for r in ref])
        y_pct.append(
            [pct(r.rep.breakdown.unprofiled_wall_ms, r.rep.breakdown.wall_ms) for r in ref]
        )
        fig.add_trace(
            go.Scatter(
                x=_x(ref),
                y=[r.rep.breakdown.unprofiled_wall_ms for r in ref],
                mode="markers",
                name="unprofiled wall (same step, no profiler)",
                marker={
                    "symbol": "line-ew-open",
                    "size": 28,
                    "color": "#000",
                    "line": {"width": 3, "color": "#000"},
                },
                customdata=[
                    [_text(r.label), f"{r.rep.breakdown.unprofiled_wall_ms:.4g}"] for r in ref
                ],
                hovertemplate="%{customdata[0]}<br>unprofiled wall %{customdata[1]} ms/iter"
                "<extra></extra>",
            )
        )
    timed = [r for r in shown if r.median_ms is not None]
    if timed:
        y_ms.append([r.median_ms for r in timed])
        y_pct.append([pct(r.median_ms, r.rep.breakdown.wall_ms) for r in timed])
        fig.add_trace(
            go.Scatter(
                x=_x(timed),
                y=y_ms[-1],
                mode="markers",
                name="median of the timed loop (the report's latency)",
                marker={"symbol": "diamond", "size": 9, "color": "#fff", "line": {"width": 2}},
                customdata=[[_text(r.label), f"{r.median_ms:.4g}"] for r in timed],
                hovertemplate="%{customdata[0]}<br>timed loop median %{customdata[1]} ms per "
                "batch<extra></extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT + 40,
        barmode="relative",
        title={"text": "where the time goes: one iteration (one batch) of the profiled pass"},
        yaxis={"title": {"text": Y_MS}},
        xaxis={"title": {"text": "workload · backend"}},
        legend={"traceorder": "normal"},
        hovermode="closest",
        updatemenus=[
            {
                "type": "buttons",
                "direction": "right",
                "x": 1,
                "xanchor": "right",
                "y": 1.12,
                "yanchor": "bottom",
                "buttons": [
                    {
                        "label": "ms per iteration",
                        "method": "update",
                        "args": [{"y": y_ms}, {"yaxis.title.text": Y_MS}],
                    },
                    {
                        "label": "share of the profiled wall (%)",
                        "method": "update",
                        "args": [{"y": y_pct}, {"yaxis.title.text": Y_PCT}],
                    },
                ],
            }
        ],
        margin={"t": 120},
    )
    note = (
        "Bars are the profiled pass's wall per iteration split by the profiler's timeline; "
        "the hatched remainder is wall the timeline did not see (negative: the parts "
        "overlap or overrun the wall). The black tick is the same step timed without the "
        "profiler: the gap up to the bar's top is instrumentation (a tick above the bar "
        "means the reference ran slower than the profiled pass: interference, not "
        "instrumentation). The white diamond is the timed loop's median, the latency the "
        "rest of the report shows. The buttons switch "
        "between milliseconds and shares of each cell's profiled wall (for backends whose "
        "times differ by orders of magnitude)."
    )
    return Panel(fig, note, notes)


# -- 2. top operators ------------------------------------------------------------------


def op_tables(rows: list[Row]) -> list[dict[str, Any]]:
    """Per cell with a breakdown: its top operators, raw strings (Jinja escapes them)."""
    out = []
    for r in rows:
        b = r.rep.breakdown
        if b is None:
            continue
        top = b.top_ops[0] if b.top_ops else None
        iters = max(b.iters, 1)
        out.append(
            {
                "title": r.label,
                "summary": (
                    f"{num(b.wall_ms)} ms/iter profiled over {b.iters} iterations"
                    + (f"; top: {top.name} {top.share:.0%}" if top else "")
                ),
                "method": b.method,
                "header": [
                    "operator",
                    "calls per iteration",
                    "self time per iteration (ms)",
                    "share of the wall (%)",
                ],
                "rows": [
                    [o.name, num(o.calls / iters), num(o.self_ms / iters), f"{100 * o.share:.1f}"]
                    for o in b.top_ops
                ],
                "notes": list(b.notes),
            }
        )
    return out


# -- 3. roofline -----------------------------------------------------------------------


def roof(intensity: float, peak_gflops: float, stream_gbs: float) -> float:
    """The roofline's ceiling at `intensity` FLOP/byte: min(compute peak, bandwidth × I)."""
    return min(peak_gflops, intensity * stream_gbs)


@dataclass(frozen=True)
class Roof:
    threads: int
    precision: str
    peak_gflops: float
    stream_gbs: float
    runs: tuple[str, ...]

    def label(self, with_runs: bool) -> str:
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        where = f" (run {', '.join(self.runs)})" if with_runs else ""
        plural = "thread" if self.threads == 1 else "threads"
        return (
            f"roof, {self.threads} {plural}{prec}: {self.peak_gflops:,.0f} GFLOP/s, "
            f"{self.stream_gbs:.1f} GB/s{where}"
        )

    def points(self, lo: float, hi: float) -> tuple[list[float], list[float]]:
        """The roof from intensity lo to hi: straight segments on log-log axes, so the
        ends and the ridge point are all it takes."""
        ridge = self.peak_gflops / self.stream_gbs
        xs = [lo, *([ridge] if lo < ridge < hi else []), hi]
        return xs, [roof(x, self.peak_gflops, self.stream_gbs) for x in xs]


def roofs(rows: list[Row]) -> list[Roof]:
    """One roof per (thread count, precision) the points use; runs that measured the same
    peaks share it, runs whose peaks differ get their own (labelled with the run)."""
    groups: dict[tuple, list[str]] = {}
    for r in rows:
        peak = r.peak_gflops
        if peak is None or r.peaks is None or r.peaks.stream_gbs <= 0:
            continue
        key = (r.cell.threads, r.cell.precision, peak, r.peaks.stream_gbs)
        if r.run_id not in groups.setdefault(key, []):
            groups[key].append(r.run_id)
    return [
        Roof(t, p, peak, bw, tuple(ids))
        for (t, p, peak, bw), ids in sorted(groups.items(), key=lambda kv: kv[0][:2])
    ]


def rep_intensity(rep: RepetitionResult) -> float | None:
    w = rep.work
    if w is None or w.flops <= 0 or w.bytes <= 0:
        return None
    return w.flops / w.bytes


def roofline_figure(rows: list[Row], colors: dict[str, str]) -> Panel:
    pts = [r for r in rows if rep_intensity(r.rep) is not None and (r.rep.achieved_gflops or 0) > 0]
    notes = [
        f"{r.label}: no FLOP count or no achieved GFLOP/s"
        + (f" ({'; '.join(r.rep.profile_notes)})" if r.rep.profile_notes else "")
        for r in rows
        if r not in pts
    ]
    if not pts:
        return Panel(None, "No profiled cell has both a FLOP count and a byte estimate.", notes)
    all_roofs = roofs(pts)
    missing = sorted({(r.cell.threads, r.cell.precision) for r in pts if r.peak_gflops is None})
    notes += [
        f"no measured {p} peak at {t} threads: those points have no roof"
        + (" (bf16 peak only where the CPU has native bf16)" if p != "fp32" else "")
        for t, p in missing
    ]
    for r in pts:
        ceiling = None
        if r.peak_gflops is not None and r.peaks is not None:
            ceiling = roof(rep_intensity(r.rep), r.peak_gflops, r.peaks.stream_gbs)
        if ceiling is not None and r.rep.achieved_gflops > ceiling * 1.001:
            notes.append(
                f"{r.label}: {r.rep.achieved_gflops:.4g} GFLOP/s is above its roof "
                f"({ceiling:.4g} GFLOP/s at {rep_intensity(r.rep):.3g} FLOP/byte): the byte "
                "estimate overcounts the memory traffic (cache reuse), or the peak is low"
            )
    intens = [rep_intensity(r.rep) for r in pts]
    ridges = [rf.peak_gflops / rf.stream_gbs for rf in all_roofs]
    lo = min([*intens, *ridges]) / 4
    hi = max([*intens, *ridges]) * 4
    fig = go.Figure()
    many_runs = len({run for rf in all_roofs for run in rf.runs}) > 1
    for i, rf in enumerate(all_roofs):
        xs, ys = rf.points(lo, hi)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=_text(rf.label(many_runs)),
                line={"color": "#444", "dash": ROOF_DASH[i % len(ROOF_DASH)], "width": 1.5},
                hovertemplate="ceiling %{y:.4g} GFLOP/s at %{x:.3g} FLOP/byte<extra></extra>",
            )
        )
    threads = sorted({r.cell.threads for r in pts})
    split = len(threads) > 1  # one trace per (series, threads): shape = thread count
    for series, t in dict.fromkeys((r.series, r.cell.threads if split else None) for r in pts):
        part = [r for r in pts if r.series == series and (t is None or r.cell.threads == t)]
        name = _text(series if t is None else f"{series} · {t} thr")
        symbol = POINT_SYMBOLS[threads.index(t) % len(POINT_SYMBOLS)] if split else "circle"
        custom = []
        for r in part:
            pct = r.percent_of_peak
            custom.append(
                [
                    _text(r.workload),
                    f"{pct:.1f}%" if pct is not None else "no peak",
                    f"{r.rep.work.flops / 1e9:.4g}",
                    f"{r.rep.work.bytes / 2**20:.4g}",
                ]
            )
        fig.add_trace(
            go.Scatter(
                x=[rep_intensity(r.rep) for r in part],
                y=[r.rep.achieved_gflops for r in part],
                mode="markers",
                name=name,
                legendgroup=_text(series),
                marker={
                    "color": _color(colors, series),
                    "size": 11,
                    "opacity": 0.85,
                    "symbol": symbol,
                },
                customdata=custom,
                hovertemplate="%{customdata[0]}<br>%{y:.4g} GFLOP/s (%{customdata[1]} of peak)"
                "<br>%{x:.3g} FLOP/byte: %{customdata[2]} GFLOP, ~%{customdata[3]} MiB"
                f" (estimated)<extra>{_extra(_text(series))}</extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT + 40,
        title={"text": "roofline under this machine's measured peaks (bytes ESTIMATED)"},
        xaxis={
            "type": "log",
            "title": {
                "text": "arithmetic intensity (FLOP/byte, bytes ESTIMATED: operator-level "
                "traffic), log scale"
            },
        },
        yaxis={"type": "log", "title": {"text": "achieved GFLOP/s, log scale"}},
        hovermode="closest",
    )
    return Panel(fig, BYTES_CAVEAT, notes)


# -- 4. % of peak ----------------------------------------------------------------------


PEAK_HEADER = [
    "backend",
    "workload",
    "precision",
    "GFLOP per batch",
    "intensity (FLOP/byte, est.)",
    "achieved (GFLOP/s)",
    "measured peak (GFLOP/s)",
    "% of peak",
]


def peak_table(rows: list[Row]) -> list[list[str]]:
    """Cells with an achieved GFLOP/s, against the peak at their threads and precision."""
    out = []
    for r in rows:
        g = r.rep.achieved_gflops
        if g is None:
            continue
        w, pct, intensity = r.rep.work, r.percent_of_peak, rep_intensity(r.rep)
        out.append(
            [
                r.series,
                r.workload,
                r.cell.precision,
                num(w.flops / 1e9) if w else "—",
                num(intensity, 3) if intensity is not None else "—",
                num(g),
                num(r.peak_gflops) if r.peak_gflops else "—",
                f"{pct:.1f}" if pct is not None else "—",
            ]
        )
    return out


# -- 5. utilization --------------------------------------------------------------------


def busy_notes(rows: list[Row]) -> list[str]:
    out = []
    for r in rows:
        t = r.rep.telemetry
        if t is not None and t.busy_machine:
            out.append(
                f"BUSY MACHINE: {r.label}: other processes used {t.other_busy_cores_mean:.2f} "
                f"cores on average (threshold {t.busy_threshold_cores:g}): its times and "
                "energy are suspect"
            )
    return out


def _sampling(t: Telemetry) -> str:
    """How the sampler kept up: under SCHED_IDLE its samples come late while every core
    is busy (the means come from the cell's own counters at the loop's edges)."""
    text = f"{t.n_samples} samples every {t.interval_s * 1e3:g} ms asked"
    if t.gap_max_s is not None:
        text += f", longest gap {t.gap_max_s * 1e3:.0f} ms"
    return _text(text + (f" (sampler: {t.sched})" if t.sched else ""))


def utilization_figure(rows: list[Row], colors: dict[str, str]) -> Panel:
    """Mean CPU use of the worker (cores) per cell; busy-machine cells hatched in red."""
    shown = [r for r in rows if r.rep.telemetry is not None]
    notes = busy_notes(shown)
    if not shown:
        return Panel(None, "No profiled cell has telemetry (the side-channel sampler).")
    fig = go.Figure()
    for series in dict.fromkeys(r.series for r in shown):
        part = [r for r in shown if r.series == series]
        busy = [r.rep.telemetry.busy_machine for r in part]
        color = _color(colors, series)
        fig.add_trace(
            go.Bar(
                x=_x(part),
                y=[r.rep.telemetry.cpu_util_cores_mean for r in part],
                name=_text(series),
                marker={
                    "color": color,
                    "line": {
                        "color": [BUSY_COLOR if b else color for b in busy],
                        "width": [3 if b else 0 for b in busy],
                    },
                    "pattern": {
                        "shape": ["x" if b else "" for b in busy],
                        "fgcolor": BUSY_COLOR,
                    },
                },
                text=["busy machine" if b else "" for b in busy],
                textposition="outside",
                textfont={"color": BUSY_COLOR},
                customdata=[
                    [
                        f"{r.rep.telemetry.cpu_util_percent_of_threads:.0f}%",
                        _text(r.rep.telemetry.cpu_util_percent_basis),
                        f"{r.rep.telemetry.cpu_util_cores_max:.2f}",
                        f"{r.rep.telemetry.other_busy_cores_mean:.2f}",
                        _sampling(r.rep.telemetry),
                    ]
                    for r in part
                ],
                hovertemplate="%{y:.2f} cores mean, %{customdata[2]} max"
                "<br>%{customdata[0]} (%{customdata[1]})"
                "<br>other processes: %{customdata[3]} cores"
                "<br>%{customdata[4]}"
                f"<extra>{_extra(_text(series))}</extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=_x(shown),
            y=[r.cell.threads for r in shown],
            mode="markers",
            name="threads requested",
            marker={"symbol": "line-ew-open", "size": 28, "color": "#000", "line": {"width": 2}},
            customdata=[_text(r.label) for r in shown],
            hovertemplate="%{customdata}<br>%{y} threads requested<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=_x(shown),
            y=[r.rep.telemetry.other_busy_cores_mean for r in shown],
            mode="markers",
            name="other processes (cores)",
            marker={"symbol": "diamond", "size": 9, "color": "#7f7f7f"},
            customdata=[_text(r.label) for r in shown],
            hovertemplate="%{customdata}<br>others %{y:.2f} cores<extra></extra>",
        )
    )
    threshold = max(r.rep.telemetry.busy_threshold_cores for r in shown)
    fig.add_hline(
        y=threshold,
        line_dash="dot",
        line_color=BUSY_COLOR,
        annotation_text=f"busy threshold for others ({threshold:g} cores)",
        annotation_font_color=BUSY_COLOR,
    )
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        barmode="overlay",
        title={
            "text": "CPU use over the timed loop (cores, side-channel sampler)"
            + (f"; {len(notes)} busy-machine cell(s) hatched red" if notes else "")
        },
        yaxis={
            "title": {"text": "CPU use (cores, mean over the timed loop)"},
            "rangemode": "tozero",
        },
        xaxis={"title": {"text": "workload · backend"}},
        hovermode="closest",
    )
    return Panel(fig, "", notes)


# -- 6. energy -------------------------------------------------------------------------


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


def energy_points(rows: list[Row]) -> pd.DataFrame:
    """One row per cell with an energy: throughput (samples/s) and power (W), per method."""
    recs = []
    for r in rows:
        e = r.rep.energy
        if e is None:
            continue
        tput = r.rep.throughput
        if tput is None and e.seconds > 0:
            tput = e.samples / e.seconds
        recs.append(
            {
                "series": r.series,
                "workload": r.workload,
                "batch_size": r.cell.batch_size,
                "group": f"{r.series} · {e.device} · {e.method}",
                "device": e.device,
                "method": e.method,
                "source": e.source,
                "note": e.note,
                "throughput": tput,
                "watts": e.watts,
                "samples_per_joule": e.samples_per_joule,
                "joules_per_sample": e.joules_per_sample,
                "row": r,
            }
        )
    return pd.DataFrame(recs)


def energy_figure(rows: list[Row], colors: dict[str, str]) -> Panel:
    """Power against throughput per device, one series per backend and method, with a
    least-squares line and its R² per series (two or more distinct throughputs)."""
    from stackcost.measure.energy import fit_power_throughput

    df = energy_points(rows)
    if df.empty:
        return Panel(
            None,
            "No profiled cell has an energy figure (no telemetry, or the sampler was not running).",
        )
    df = df[df["throughput"].notna()]
    if df.empty:
        return Panel(None, "No cell with an energy figure has a throughput to plot it against.")
    notes: list[str] = []
    methods = sorted(df["method"].unique())
    for m in methods:
        part = df[df["method"] == m]
        notes.append(f"{m} ({len(part)} cells): {_sources([r.rep.energy for r in part['row']])}")
    fig = go.Figure()
    for group, part in df.groupby("group", sort=False):
        series = part["series"].iloc[0]
        color = _color(colors, series)
        method = part["method"].iloc[0]
        symbol = "circle" if method == "measured" else "circle-open"
        fig.add_trace(
            go.Scatter(
                x=part["throughput"].tolist(),
                y=part["watts"].tolist(),
                mode="markers",
                name=_text(group),
                legendgroup=_text(group),
                marker={"color": color, "size": 11, "symbol": symbol, "line": {"width": 2}},
                customdata=[
                    [_text(w), f"{spj:.4g}", _text(src)]
                    for w, spj, src in zip(
                        part["workload"], part["samples_per_joule"], part["source"], strict=True
                    )
                ],
                hovertemplate="%{customdata[0]}<br>%{y:.3g} W at %{x:.4g} samples/s, "
                "%{customdata[1]} samples/J<br>%{customdata[2]}"
                f"<extra>{_extra(_text(group))}</extra>",
            )
        )
        pts = list(zip(part["throughput"], part["watts"], strict=True))
        if len(pts) < 2 or len({p[0] for p in pts}) < 2:
            notes.append(
                f"{group}: {len(pts)} point(s), {len({p[0] for p in pts})} distinct "
                "throughput(s): no line fitted (needs two or more)"
            )
            continue
        slope, intercept, r2 = fit_power_throughput(pts)
        # Two points always fit exactly: an R² of 1 would claim a fit that was never tested.
        r2_text = f"R² = {r2:.3f}" if len(pts) > 2 else "R² n/a (2 points)"
        x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
        fig.add_trace(
            go.Scatter(
                x=[x0, x1],
                y=[intercept + slope * x0, intercept + slope * x1],
                mode="lines",
                name=_text(f"{group} fit: {slope:.3g} W per sample/s, {r2_text}"),
                legendgroup=_text(group),
                line={"color": color, "dash": "dash" if method == "estimated" else "solid"},
                hovertemplate=f"P = {intercept:.4g} W + {slope:.4g} W·s/sample × throughput"
                f"<br>{r2_text} over {len(pts)} cells<extra>{_extra(_text(group))}</extra>",
            )
        )
    label = (
        "ESTIMATED from a power model, not measured"
        if methods == ["estimated"]
        else "measured by hardware counters"
        if methods == ["measured"]
        else "measured and ESTIMATED points are separate series, never mixed"
    )
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        title={"text": f"power against throughput: {label}"},
        xaxis={"title": {"text": "throughput (samples/s)"}},
        yaxis={"title": {"text": "power (W)"}, "rangemode": "tozero"},
        hovermode="closest",
    )
    return Panel(fig, "", notes)


def _best_rows(df: pd.DataFrame, value: str, keys: list[str]) -> dict[str, Any]:
    batches = sorted(int(b) for b in df["batch_size"].unique())
    rows = []
    for key, grp in df.groupby(keys, sort=False):
        cells = []
        for b in batches:
            at = grp[(grp["batch_size"] == b) & grp[value].notna()]
            if at.empty:
                cells.append({"text": "—", "value": ""})
                continue
            best = at.loc[at[value].idxmax()]
            runner = at[at.index != best.name][value].max()
            margin = (
                f" (+{best[value] / runner - 1:.0%} over next)"
                if pd.notna(runner) and runner > 0
                else ""
            )
            cells.append({"text": str(best["series"]), "value": num(float(best[value])) + margin})
        rows.append(
            {
                "label": " · ".join(str(k) for k in (key if isinstance(key, tuple) else (key,))),
                "cells": cells,
            }
        )
    return {"columns": batches, "rows": rows}


def best_tables(rows: list[Row]) -> list[dict[str, Any]]:
    """Best backend per batch size, for throughput and (per energy method) samples/J."""
    recs = []
    for r in rows:
        c = r.cell
        workload = " · ".join(
            [
                c.model.name,
                *([c.size_label()] if c.sizes else []),
                f"{c.threads} thr",
                c.precision,
                c.device,
            ]
        )
        e = r.rep.energy
        recs.append(
            {
                "workload": workload,
                "batch_size": c.batch_size,
                "series": r.series,
                "throughput": r.throughput,
                "samples_per_joule": e.samples_per_joule if e else None,
                "method": e.method if e else None,
            }
        )
    df = pd.DataFrame(recs)
    out = []
    if df.empty:
        return out
    df["throughput"] = pd.to_numeric(df["throughput"], errors="coerce")
    df["samples_per_joule"] = pd.to_numeric(df["samples_per_joule"], errors="coerce")
    if df["throughput"].notna().any():
        out.append(
            {
                "title": "best backend per batch size: throughput (samples/s, median)",
                **_best_rows(df, "throughput", ["workload"]),
            }
        )
    energy = df[df["samples_per_joule"].notna()]
    if not energy.empty:
        energy = energy.assign(workload=energy["workload"] + " · " + energy["method"])
        out.append(
            {
                "title": "best backend per batch size: energy efficiency (samples/J; the "
                "method, measured or estimated, is part of each row: rows are never mixed)",
                **_best_rows(energy, "samples_per_joule", ["workload"]),
            }
        )
    return out


# -- 7. thread scaling -----------------------------------------------------------------

# "sizes" ("224 px", "128 tokens", ""): one key for every size axis, never NaN.
SCALING_AXES = ("model", "mode", "batch_size", "sizes", "precision", "device", "init")
UNSTABLE_BASE = "(base unstable?)"


def scaling_frame(summ: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, series) measured at two or more thread counts: the speedup of each
    thread count over the smallest, from median latencies of valid cells. base_trusted is
    False where a cell at the smallest count was unstable: those speedups are marked."""
    cols = [
        *SCALING_AXES,
        *data.size_columns(summ),  # for labels: "res 32 px", "seq len 128 tokens"
        "series",
        "threads",
        "median_ms",
        "base_threads",
        "base_trusted",
        "speedup",
        "ideal",
    ]
    if summ is None or summ.empty:
        return pd.DataFrame(columns=cols)
    valid = summ[summ["valid"] & summ["median_ms"].notna()]
    parts = []
    for _, grp in valid.groupby([*SCALING_AXES, "series"], sort=False):
        # Two runs of the same series and workload at one thread count: their median.
        g = (
            grp.groupby("threads", as_index=False)
            .agg(median_ms=("median_ms", "median"), trusted=("trusted", "all"))
            .sort_values("threads")
        )
        if len(g) < 2:
            continue
        base_t, base_ms = int(g["threads"].iloc[0]), float(g["median_ms"].iloc[0])
        first = grp.iloc[0]
        g = g.assign(
            **{a: first[a] for a in [*SCALING_AXES, *data.size_columns(summ), "series"]},
            base_threads=base_t,
            base_trusted=bool(g["trusted"].iloc[0]),
            speedup=base_ms / g["median_ms"],
            ideal=g["threads"] / base_t,
        )
        parts.append(g)
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]


def scaling_figure(summ: pd.DataFrame, colors: dict[str, str]) -> Panel:
    df = scaling_frame(summ)
    if df.empty:
        return Panel(
            None,
            "No workload was measured at two or more thread counts (e.g. --threads 1,2): "
            "no thread scaling to show.",
        )
    fixed = [a for a in SCALING_AXES if df[a].nunique() > 1 or a in ("model", "batch_size")]
    fmt = {"batch_size": "batch {}", "init": "init {}"}
    keys = list(dict.fromkeys(tuple(r[a] for a in SCALING_AXES) for _, r in df.iterrows()))
    fig = go.Figure()
    owners: list[int] = []
    labels: list[str] = []
    for gi, key in enumerate(keys):
        sel = df[[tuple(r) == key for r in df[list(SCALING_AXES)].itertuples(index=False)]]
        row = sel.iloc[0]
        parts = (
            data.sizes_text(row) if a == "sizes" else fmt.get(a, "{}").format(row[a])
            for a in SCALING_AXES
            if a in fixed
        )
        labels.append(_text(" · ".join(p for p in parts if p)))
        for base in sorted(sel["base_threads"].unique()):
            ts = sorted(sel["threads"].unique())
            fig.add_trace(
                go.Scatter(
                    x=ts,
                    y=[t / base for t in ts],
                    mode="lines",
                    name=f"ideal (linear from {base} thread{'s' if base > 1 else ''})",
                    line={"color": "#888", "dash": "dash"},
                    visible=gi == 0,
                    hovertemplate="ideal %{y:.2f}× at %{x} threads<extra></extra>",
                )
            )
            owners.append(gi)
        for series, s in sel.groupby("series", sort=False):
            trusted = bool(s["base_trusted"].all())
            fig.add_trace(
                go.Scatter(
                    x=s["threads"].tolist(),
                    y=s["speedup"].tolist(),
                    mode="lines+markers",
                    name=_text(series) + ("" if trusted else f" {UNSTABLE_BASE}"),
                    line={"color": _color(colors, series), "dash": "solid" if trusted else "dot"},
                    visible=gi == 0,
                    customdata=list(
                        zip(s["median_ms"], 100 * s["speedup"] / s["ideal"], strict=True)
                    ),
                    hovertemplate="%{x} threads: %{y:.2f}× (median %{customdata[0]:.4g} ms, "
                    f"efficiency %{{customdata[1]:.0f}}%)<extra>{_extra(_text(series))}</extra>",
                )
            )
            owners.append(gi)
    title = "thread scaling: speedup over the smallest thread count"
    masks = [[o == gi for o in owners] for gi in range(len(keys))]
    all_t = [int(t) for t in df["threads"]]
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        title={"text": f"{title}: {labels[0]}"},
        xaxis=_log2_axis(all_t, "intra-op threads"),
        yaxis={"type": "log", "title": {"text": "speedup (×, median latency ratio), log scale"}},
        updatemenus=_selector(labels, masks, title),
        margin={"t": 110},
        hovermode="closest",
    )
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
    return Panel(fig, note)


# -- the section -----------------------------------------------------------------------


@dataclass
class Section:
    profiled: int  # cells with profile data
    panels: dict[str, Panel]
    op_tables: list[dict[str, Any]]
    peak_header: list[str]
    peak_rows: list[list[str]]
    best_tables: list[dict[str, Any]]
    note: str = ""


def section(runs: list[RunResult], summ: pd.DataFrame, colors: dict[str, str]) -> Section:
    """Everything the page's "where the time goes" section shows."""
    rows = collect(runs, summ)
    panels: dict[str, Panel] = {}
    if rows:
        panels["breakdown"] = breakdown_figure(rows, colors)
        panels["roofline"] = roofline_figure(rows, colors)
        panels["utilization"] = utilization_figure(rows, colors)
        panels["energy"] = energy_figure(rows, colors)
    panels["scaling"] = scaling_figure(summ, colors)
    return Section(
        profiled=len(rows),
        panels=panels,
        op_tables=op_tables(rows),
        peak_header=PEAK_HEADER,
        peak_rows=peak_table(rows),
        best_tables=best_tables(rows),
        note="" if rows else NO_PROFILE,
    )
