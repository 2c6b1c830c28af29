"""Panel 3: how many cores each cell kept busy, and whether anything else used them."""

from __future__ import annotations

import plotly.graph_objects as go

from stackcost.measure.telemetry import Telemetry
from stackcost.report.frames.costs import Row
from stackcost.report.html.costs.panel import Panel, series_color, workload_axis
from stackcost.report.html.plots import HEIGHT, TEMPLATE, escape_label, hover_literal

BUSY_COLOR = "#D62728"


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
    return escape_label(text + (f" (sampler: {t.sched})" if t.sched else ""))


def _usage_bars(part: list[Row], series: str, color: str) -> go.Bar:
    """One series' mean cores per cell; a busy-machine cell outlined, hatched and named."""
    busy = [r.rep.telemetry.busy_machine for r in part]
    return go.Bar(
        x=workload_axis(part),
        y=[r.rep.telemetry.cpu_util_cores_mean for r in part],
        name=escape_label(series),
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
                escape_label(r.rep.telemetry.cpu_util_percent_basis),
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
        f"<extra>{hover_literal(escape_label(series))}</extra>",
    )


def _reference_marks(shown: list[Row]) -> list[go.Scatter]:
    """What each bar is read against: the threads it asked for (a tick) and the cores
    other processes used meanwhile (a grey diamond)."""
    return [
        go.Scatter(
            x=workload_axis(shown),
            y=[r.cell.threads for r in shown],
            mode="markers",
            name="threads requested",
            marker={"symbol": "line-ew-open", "size": 28, "color": "#000", "line": {"width": 2}},
            customdata=[escape_label(r.label) for r in shown],
            hovertemplate="%{customdata}<br>%{y} threads requested<extra></extra>",
        ),
        go.Scatter(
            x=workload_axis(shown),
            y=[r.rep.telemetry.other_busy_cores_mean for r in shown],
            mode="markers",
            name="other processes (cores)",
            marker={"symbol": "diamond", "size": 9, "color": "#7f7f7f"},
            customdata=[escape_label(r.label) for r in shown],
            hovertemplate="%{customdata}<br>others %{y:.2f} cores<extra></extra>",
        ),
    ]


def utilization_figure(rows: list[Row], colors: dict[str, str]) -> Panel:
    """Mean CPU use of the worker (cores) per cell; busy-machine cells hatched in red."""
    shown = [r for r in rows if r.rep.telemetry is not None]
    notes = busy_notes(shown)
    if not shown:
        return Panel(None, "No profiled cell has telemetry (the side-channel sampler).")
    fig = go.Figure()
    for series in dict.fromkeys(r.series for r in shown):
        part = [r for r in shown if r.series == series]
        fig.add_trace(_usage_bars(part, series, series_color(colors, series)))
    for trace in _reference_marks(shown):
        fig.add_trace(trace)
    # Other processes above this line make a cell's times and energy suspect.
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
