"""Panel 2: each cell on a roofline under the machine's measured peaks, and its share of
those peaks (a table)."""

from __future__ import annotations

import plotly.graph_objects as go

from stackcost.report.frames.costs import Roof, Row, rep_intensity, roof, roofs
from stackcost.report.html.costs.panel import Panel, series_color
from stackcost.report.html.plots import (
    HEIGHT,
    TEMPLATE,
    escape_label,
    hover_literal,
    label_log_axis,
)
from stackcost.report.units import num

ROOF_DASH = ("solid", "dash", "dot", "dashdot", "longdash")
POINT_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "star", "cross")
BYTES_CAVEAT = (
    "Bytes are ESTIMATED (operator-level traffic): every operator is assumed to read its "
    "tensor inputs and write its outputs once, with no cache reuse modelled, so the "
    "intensity is a model, not a measurement (a point above the slanted roof usually means "
    "the estimate counts traffic that really came from cache). FLOPs count matmul- and convolution-like "
    "ops only (torch FlopCounterMode, 2 per multiply-add), for every backend alike."
)


def _missing_peak_notes(pts: list[Row]) -> list[str]:
    """Per (device, threads, precision) with no measured peak: its points have no roof."""
    missing = sorted(
        {(r.cell.device, r.cell.threads, r.cell.precision) for r in pts if r.peak_gflops is None}
    )
    return [
        (
            f"no measured {p} peak at {t} threads: those points have no roof"
            + (" (bf16 peak only where the CPU has native bf16)" if p != "fp32" else "")
            if d == "cpu"
            else f"no measured {p} peak on {d}: those points have no roof"
            + (" (stackcost peaks --device cuda measures fp32, tf32, bf16, fp16)")
        )
        for d, t, p in missing
    ]


def _above_roof_notes(pts: list[Row]) -> list[str]:
    """Points above their own roof: the byte estimate or the peak is off, and says which."""
    notes = []
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
    return notes


def _roof_traces(pts: list[Row], all_roofs: list[Roof]) -> list[go.Scatter]:
    """Each roof as a line, over the intensities of the points and ridges with room around."""
    intens = [rep_intensity(r.rep) for r in pts]
    ridges = [rf.peak_gflops / rf.stream_gbs for rf in all_roofs]
    lo = min([*intens, *ridges]) / 4
    hi = max([*intens, *ridges]) * 4
    many_runs = len({run for rf in all_roofs for run in rf.runs}) > 1
    traces = []
    for i, rf in enumerate(all_roofs):
        xs, ys = rf.points(lo, hi)
        traces.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=escape_label(rf.label(many_runs)),
                line={"color": "#444", "dash": ROOF_DASH[i % len(ROOF_DASH)], "width": 1.5},
                hovertemplate="ceiling %{y:.4g} GFLOP/s at %{x:.3g} FLOP/byte<extra></extra>",
            )
        )
    return traces


def _point_traces(pts: list[Row], colors: dict[str, str]) -> list[go.Scatter]:
    """One trace per series, or per (series, thread count) where the points span several:
    colour says the backend, shape the thread count."""
    threads = sorted({r.cell.threads for r in pts})
    split = len(threads) > 1
    traces = []
    for series, t in dict.fromkeys((r.series, r.cell.threads if split else None) for r in pts):
        part = [r for r in pts if r.series == series and (t is None or r.cell.threads == t)]
        name = escape_label(series if t is None else f"{series} · {t} thr")
        symbol = POINT_SYMBOLS[threads.index(t) % len(POINT_SYMBOLS)] if split else "circle"
        custom = []
        for r in part:
            pct = r.percent_of_peak
            custom.append(
                [
                    escape_label(r.workload),
                    f"{pct:.1f}%" if pct is not None else "no peak",
                    f"{r.rep.work.flops / 1e9:.4g}",
                    f"{r.rep.work.bytes / 2**20:.4g}",
                ]
            )
        traces.append(
            go.Scatter(
                x=[rep_intensity(r.rep) for r in part],
                y=[r.rep.achieved_gflops for r in part],
                mode="markers",
                name=name,
                legendgroup=escape_label(series),
                marker={
                    "color": series_color(colors, series),
                    "size": 11,
                    "opacity": 0.85,
                    "symbol": symbol,
                },
                customdata=custom,
                hovertemplate="%{customdata[0]}<br>%{y:.4g} GFLOP/s (%{customdata[1]} of peak)"
                "<br>%{x:.3g} FLOP/byte: %{customdata[2]} GFLOP, ~%{customdata[3]} MiB"
                f" (estimated)<extra>{hover_literal(escape_label(series))}</extra>",
            )
        )
    return traces


def roofline_figure(rows: list[Row], colors: dict[str, str]) -> Panel:
    """Each cell with a FLOP count and a byte estimate at its arithmetic intensity and
    achieved GFLOP/s, under the roofs of the peaks measured where it ran; notes say which
    cells are not drawn, which have no roof and which sit above theirs."""
    pts = [r for r in rows if rep_intensity(r.rep) is not None and (r.rep.achieved_gflops or 0) > 0]
    notes = [
        f"{r.label}: no FLOP count or no achieved GFLOP/s"
        + (f" ({'; '.join(r.rep.profile_notes)})" if r.rep.profile_notes else "")
        for r in rows
        if r not in pts
    ]
    if not pts:
        return Panel(None, "No profiled cell has both a FLOP count and a byte estimate.", notes)
    notes += _missing_peak_notes(pts) + _above_roof_notes(pts)
    fig = go.Figure()
    for trace in [*_roof_traces(pts, roofs(pts)), *_point_traces(pts, colors)]:
        fig.add_trace(trace)
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
    label_log_axis(fig, "xaxis", " FLOP/B")
    label_log_axis(fig, "yaxis", " GFLOP/s")
    return Panel(fig, BYTES_CAVEAT, notes)


PEAK_HEADER = [
    "backend",
    "workload",
    "precision",
    "GFLOP per batch",
    "intensity (FLOP/byte, est.)",
    "achieved (GFLOP/s)",
    "measured peak (GFLOP/s)",
    "% of peak",
    "peak",
]


def peak_table(rows: list[Row]) -> list[list[str]]:
    """Cells with an achieved GFLOP/s, against the peak of their precision on their device
    (a CPU's at their thread count, a GPU's matmul peak), named in the last column."""
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
                r.peak[0] if r.peak else "—",
            ]
        )
    return out
