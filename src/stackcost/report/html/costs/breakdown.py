"""Panel 1: where each iteration's time goes (kernels, overhead, ... and the remainder the
profiler did not see), and the top operators per cell."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from stackcost.profile.breakdown import CPU_PARTS, GPU_PARTS
from stackcost.report.frames.costs import Row
from stackcost.report.html.costs.panel import Panel, workload_axis
from stackcost.report.html.plots import HEIGHT, TEMPLATE, escape_label, hover_literal
from stackcost.report.style import PALETTE, PART_COLORS, REMAINDER_COLOR
from stackcost.report.units import num
from stackcost.result import RepetitionResult

TOP_OPS_IN_HOVER = 3
Y_MS = "time per iteration (ms)"
Y_PCT = "share of the profiled wall (%)"


def _top(rep: RepetitionResult, n: int = TOP_OPS_IN_HOVER) -> str:
    b = rep.breakdown
    if b is None or not b.top_ops:
        return "no operator table"
    ops = [f"{escape_label(o.name)} {o.share:.0%}" for o in b.top_ops[:n]]
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


def _part_order(shown: list[Row]) -> list[str]:
    """The parts the cells have: the profilers' known ones in their order, then the rest."""
    known = [*CPU_PARTS, *GPU_PARTS]
    seen = list(dict.fromkeys(k for r in shown for k in r.rep.breakdown.parts_ms))
    return [p for p in known if p in seen] + [p for p in seen if p not in known]


def _pct(ms: float | None, wall: float) -> float | None:
    """`ms` as a percentage of the cell's profiled wall; None where there is none."""
    return None if ms is None or wall <= 0 else 100 * ms / wall


# One trace of the figure: the trace, the rows it draws, and its y in ms per row (the unit
# toggle recomputes the y of every trace as a share of each row's wall).
_Layer = tuple[go.Bar | go.Scatter, list[Row], list[float | None]]


def _part_bar(shown: list[Row], part: str | None, color: str) -> _Layer:
    """One stacked part across the cells; part None is the remainder, hatched."""
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
                escape_label(r.label),
                "—" if ms is None else f"{ms:.4g}",
            ]
        )
    name = "remainder (not seen by the profiler)" if part is None else escape_label(part)
    marker: dict[str, Any] = {"color": color}
    if part is None:
        marker["pattern"] = {"shape": "/", "fgcolor": "#555", "solidity": 0.3}
    bar = go.Bar(
        x=workload_axis(shown),
        y=ys,
        name=name,
        marker=marker,
        customdata=custom,
        hovertemplate="%{customdata[4]}<br>"
        f"{hover_literal(name)}: %{{customdata[5]}} ms/iter (%{{customdata[1]}} of the "
        "%{customdata[2]} ms wall)<br>%{customdata[0]}"
        "<br>profiled over %{customdata[3]} iterations<extra></extra>",
    )
    return bar, shown, ys


def _part_bars(shown: list[Row]) -> list[_Layer]:
    """Every part's bar, then the remainder's; parts without a colour of their own take
    the palette's next."""
    extra_colors = iter(PALETTE[5:])
    bars = []
    for part in [*_part_order(shown), None]:
        color = (
            REMAINDER_COLOR
            if part is None
            else PART_COLORS.get(part) or next(extra_colors, "#7f7f7f")
        )
        bars.append(_part_bar(shown, part, color))
    return bars


def _reference_marks(shown: list[Row]) -> list[_Layer]:
    """What the bars are read against: the same step timed without the profiler (a black
    tick) and the timed loop's median (a white diamond), where the cells have them."""
    marks: list[_Layer] = []
    ref = [r for r in shown if r.rep.breakdown.unprofiled_wall_ms is not None]
    if ref:
        ys = [r.rep.breakdown.unprofiled_wall_ms for r in ref]
        tick = go.Scatter(
            x=workload_axis(ref),
            y=ys,
            mode="markers",
            name="unprofiled wall (same step, no profiler)",
            marker={
                "symbol": "line-ew-open",
                "size": 28,
                "color": "#000",
                "line": {"width": 3, "color": "#000"},
            },
            customdata=[
                [escape_label(r.label), f"{r.rep.breakdown.unprofiled_wall_ms:.4g}"] for r in ref
            ],
            hovertemplate="%{customdata[0]}<br>unprofiled wall %{customdata[1]} ms/iter"
            "<extra></extra>",
        )
        marks.append((tick, ref, ys))
    timed = [r for r in shown if r.median_ms is not None]
    if timed:
        ys = [r.median_ms for r in timed]
        diamond = go.Scatter(
            x=workload_axis(timed),
            y=ys,
            mode="markers",
            name="median of the timed loop (the report's latency)",
            marker={"symbol": "diamond", "size": 9, "color": "#fff", "line": {"width": 2}},
            customdata=[[escape_label(r.label), f"{r.median_ms:.4g}"] for r in timed],
            hovertemplate="%{customdata[0]}<br>timed loop median %{customdata[1]} ms per "
            "batch<extra></extra>",
        )
        marks.append((diamond, timed, ys))
    return marks


def _unit_buttons(y_ms: list[list[float | None]], y_pct: list[list[float | None]]) -> dict:
    """Buttons switching every trace between ms and shares of each cell's profiled wall."""
    return {
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


BREAKDOWN_NOTE = (
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


def breakdown_figure(rows: list[Row], colors: dict[str, str]) -> Panel:
    """Stacked per-iteration parts per backend, grouped by workload; remainder hatched."""
    notes = breakdown_notes(rows)
    shown = [r for r in rows if r.rep.breakdown is not None]
    if not shown:
        return Panel(None, "No profiled cell has a breakdown.", notes)
    fig = go.Figure()
    y_ms: list[list[float | None]] = []  # per trace: ms per iteration
    y_pct: list[list[float | None]] = []  # per trace: % of the profiled wall
    for trace, drawn, ms in [*_part_bars(shown), *_reference_marks(shown)]:
        fig.add_trace(trace)
        y_ms.append(ms)
        y_pct.append([_pct(v, r.rep.breakdown.wall_ms) for v, r in zip(ms, drawn, strict=True)])
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT + 40,
        barmode="relative",
        title={"text": "where the time goes: one iteration (one batch) of the profiled pass"},
        yaxis={"title": {"text": Y_MS}},
        xaxis={"title": {"text": "workload · backend"}},
        legend={"traceorder": "normal"},
        hovermode="closest",
        updatemenus=[_unit_buttons(y_ms, y_pct)],
        margin={"t": 120},
    )
    return Panel(fig, BREAKDOWN_NOTE, notes)


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
