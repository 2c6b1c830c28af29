"""Interactive plotly figures for the HTML report; each builder returns None when it has
nothing honest to draw (the page shows a note instead of an empty or one-point plot)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from numbers import Real
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from stackcost.backends import BASELINE
from stackcost.cell import SIZE_TAGS
from stackcost.report.frames import quant
from stackcost.report.frames.tidy import (
    MIB,
    RATIO_METRICS,
    SIZE_COLUMNS,
    Sweep,
    ratio_summary,
    startup_summary,
    sweeps,
)
from stackcost.report.style import AXIS_LABEL, X_NAME

if TYPE_CHECKING:
    from stackcost.report.frames.pareto import Panel as ParetoPanel

TEMPLATE = "plotly_white"
HEIGHT = 460

# metric -> (line column, band low, band high, y label, log y)
SWEEP_METRICS: dict[str, tuple[str, str | None, str | None, str, bool]] = {
    "latency": ("median_ms", "band_low_ms", "band_high_ms", AXIS_LABEL["median_ms"], True),
    "throughput": (
        "throughput_per_s",
        "throughput_low_per_s",
        "throughput_high_per_s",
        AXIS_LABEL["throughput_per_s"],
        False,
    ),
    "memory": ("peak_rss_mib", None, None, "peak memory (MiB)", False),
}
UNIT = {"latency": "ms", "throughput": "samples/s", "memory": "MiB"}


# Plotly renders text as pseudo-HTML (it drops unknown tags and decodes entities), so
# strings from the store are entity-escaped to show literally, e.g. a model named "<b>".
TEXT_COLUMNS = ("model", "series", "options", "init", "precision", "device", "mode", "status")


def _escaped(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for col in TEXT_COLUMNS:
        if col in out:
            out[col] = out[col].astype(str).map(escape_label)
    return out


def _escaped_colors(colors: dict[str, str]) -> dict[str, str]:
    return {escape_label(k): v for k, v in colors.items()}


def escape_label(value: object) -> str:
    return html.escape(str(value), quote=False)


def hover_literal(text: str) -> str:
    """A hover-template literal: hover templates interpret %{...}, a name must not."""
    return text.replace("{", "(").replace("}", ")")


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def log2_axis(values: list[int], title: str) -> dict:
    """Powers of two evenly spaced, ticks at the measured values (plotly has no log2 type)."""
    ticks = sorted(set(values))
    return {
        "type": "log",
        "tickvals": ticks,
        "ticktext": [str(v) for v in ticks],
        "title": {"text": f"{title}, log₂ scale"},
    }


def log_ticks(values: Iterable[float], unit: str) -> dict:
    """Ticks of a log axis over `values`, each labelled whole with its unit ('20 ms',
    '50 ms'), where plotly's own would abbreviate all but the decades to '2', '5': every
    1-2-3-5-7 over up to 1.5 decades, 1-2-5 over 3, the decades beyond (8 at most), and
    round values evenly spaced over less than a factor of 3. `unit` is appended as given
    (' ms', '×', '' for none)."""
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if not finite:
        return {}
    lo, hi = min(finite), max(finite)
    if hi < 3 * lo:  # too narrow for a decade's marks to fall inside
        span = hi - lo or lo / 10
        e = math.floor(math.log10(span))
        step = min(m * 10.0**k for k in (e - 1, e) for m in (1, 2, 5) if span / (m * 10.0**k) <= 5)
        ticks = [k * step for k in range(math.floor(lo / step), math.ceil(hi / step) + 1)]
        return {"tickvals": ticks, "ticktext": [f"{v:,.6g}{unit}" for v in ticks]}
    first, top = math.floor(math.log10(lo)), math.floor(math.log10(hi)) + 1
    span = math.log10(hi / lo)
    steps = (1, 2, 3, 5, 7) if span <= 1.5 else (1, 2, 5) if span <= 3 else (1,)
    stride = math.ceil((top - first) / 8) if steps == (1,) else 1
    marks = [(m, e) for e in range(first, top + 1, stride) for m in steps if e < top or m == 1]
    plain = first >= -3 and top <= 4  # else every label in one form: 1e-9 … 1e-1

    def text(m: int, e: int) -> str:
        return (f"{m * 10.0**e:,g}" if plain else f"{m}e{e}") + unit

    return {"tickvals": [m * 10.0**e for m, e in marks], "ticktext": [text(*t) for t in marks]}


def label_log_axis(fig: go.Figure, axis: str, unit: str) -> None:
    """`log_ticks` on the figure's log axis `axis` ('yaxis', 'yaxis2'), over the values its
    traces draw and the range it is given."""
    letter, ref = axis[0], axis[0] + axis[5:]  # 'yaxis2' is the traces' 'y2'
    values = [
        float(v)
        for t in fig.data
        if (t[f"{letter}axis"] or letter) == ref
        for v in (t[letter] if t[letter] is not None else ())
        if isinstance(v, Real)
    ]
    given = fig.layout[axis].range
    values += [10.0**r for r in given or ()]  # a log axis' range is in decades
    fig.layout[axis].update(log_ticks(values, unit))


def dropdown(labels: list[str], masks: list[list[bool]], title: str) -> list[dict]:
    """A dropdown switching which sweep's traces are visible (the per-model selector)."""
    if len(labels) < 2:
        return []
    buttons = [
        {
            "label": lab,
            "method": "update",
            "args": [{"visible": m}, {"title.text": f"{title}: {lab}"}],
        }
        for lab, m in zip(labels, masks, strict=True)
    ]
    return [{"buttons": buttons, "x": 1, "xanchor": "right", "y": 1.2, "yanchor": "bottom"}]


def _series_traces(
    s: pd.DataFrame, series: str, x: str, metric: str, color: str, visible: bool
) -> list[go.Scatter]:
    """One series of one sweep: its min–max band where repeats differ, its median line,
    and for memory its device peak dashed where it has one."""
    col, low, high, _, _ = SWEEP_METRICS[metric]
    unit = UNIT[metric]
    xs = s[x].tolist()
    traces = []
    if low and high and (s[high] > s[low]).any():
        traces.append(
            go.Scatter(
                x=xs + xs[::-1],
                y=s[high].tolist() + s[low].tolist()[::-1],
                fill="toself",
                mode="lines",
                fillcolor=_rgba(color, 0.18),
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=series,
                name=f"{series} min–max",
                visible=visible,
            )
        )
    custom = np.column_stack([s[low] if low else s[col], s[high] if high else s[col]]).tolist()
    band = " (repeats %{customdata[0]:.4g}–%{customdata[1]:.4g})" if low else ""
    traces.append(
        go.Scatter(
            x=xs,
            y=s[col].tolist(),
            customdata=custom,
            mode="lines+markers",
            name=series,
            legendgroup=series,
            line={"color": color},
            visible=visible,
            hovertemplate=f"%{{y:.4g}} {unit}{band}<br>{X_NAME[x]} %{{x}}"
            f"<extra>{hover_literal(series)}</extra>",
        )
    )
    if metric == "memory" and s["allocator_peak_mib"].notna().any():
        d = s.dropna(subset=["allocator_peak_mib"])
        traces.append(
            go.Scatter(
                x=d[x].tolist(),
                y=d["allocator_peak_mib"].tolist(),
                mode="lines+markers",
                name=f"{series} (device)",
                legendgroup=series,
                line={"color": color, "dash": "dash"},
                visible=visible,
                hovertemplate="%{y:.4g} MiB device<extra></extra>",
            )
        )
    return traces


def _sweep_traces(
    sweep: Sweep, x: str, metric: str, colors: dict[str, str], visible: bool
) -> list[go.Scatter]:
    """Every series' traces of one sweep (one model and workload), series without the
    metric left out."""
    col = SWEEP_METRICS[metric][0]
    df = sweep.cells.assign(
        peak_rss_mib=sweep.cells["peak_rss_bytes"] / MIB,
        allocator_peak_mib=sweep.cells["allocator_peak_bytes"] / MIB,
    )
    traces = []
    for series, s in df.groupby("series", sort=False):
        s = s.dropna(subset=[col])
        if not s.empty:
            traces += _series_traces(s, series, x, metric, colors[series], visible)
    return traces


def sweep_figure(
    cell_df: pd.DataFrame, x: str, metric: str, colors: dict[str, str]
) -> go.Figure | None:
    """Median per backend against batch size or a size axis (resolution, seq len, ...),
    min–max band over repeats; the x axis is labelled by the axis' name and unit."""
    cell_df, colors = _escaped(cell_df), _escaped_colors(colors)
    groups = sweeps(cell_df, x)
    if not groups:
        return None
    fig = go.Figure()
    owners: list[int] = []  # which sweep each trace belongs to
    for gi, sweep in enumerate(groups):
        for trace in _sweep_traces(sweep, x, metric, colors, visible=gi == 0):
            fig.add_trace(trace)
            owners.append(gi)
    if not fig.data:
        return None
    _, _, _, ylabel, log_y = SWEEP_METRICS[metric]
    title = f"{metric} vs {X_NAME[x]}"
    labels = [g.label for g in groups]
    masks = [[o == gi for o in owners] for gi in range(len(groups))]
    all_x = [int(v) for g in groups for v in g.cells[x]]
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        title={"text": f"{title}: {labels[0]}"},
        xaxis=log2_axis(all_x, AXIS_LABEL[x]),
        yaxis={"title": {"text": ylabel}, "type": "log" if log_y else "linear"},
        updatemenus=dropdown(labels, masks, title),
        margin={"t": 110},
        hovermode="closest",
    )
    if log_y:
        label_log_axis(fig, "yaxis", f" {UNIT[metric]}")
    return fig


def ratio_figure(
    ratio_df: pd.DataFrame, colors: dict[str, str], baseline: str = BASELINE
) -> go.Figure | None:
    """TorchBench-style grouped bars: each backend's ratio to the baseline, per model."""
    ratio_df, colors = _escaped(ratio_df), _escaped_colors(colors)
    summ = ratio_summary(ratio_df, baseline)
    if summ.empty or summ["geomean"].notna().sum() == 0:
        return None
    has_device = bool(summ.loc[summ["metric"] == "device_mem_ratio", "geomean"].notna().any())
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(RATIO_METRICS.values()))
    for series, s in summ.groupby("series", sort=False):
        for i, metric in enumerate(RATIO_METRICS, start=1):
            m = s[s["metric"] == metric]
            fig.add_trace(
                go.Bar(
                    x=m["model"].tolist(),
                    y=m["geomean"].tolist(),
                    customdata=np.column_stack([m["low"], m["high"], m["n"]]).tolist(),
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": (m["high"] - m["geomean"]).tolist(),
                        "arrayminus": (m["geomean"] - m["low"]).tolist(),
                        "thickness": 1,
                    },
                    name=series,
                    legendgroup=series,
                    showlegend=i == 1,
                    marker_color=colors[series],
                    hovertemplate="%{y:.3f}× (range %{customdata[0]:.3f}–%{customdata[1]:.3f}"
                    f" over %{{customdata[2]}} workloads)<extra>{hover_literal(series)}</extra>",
                ),
                row=1,
                col=i,
            )
    for i in range(1, 4):
        if i < 3 or has_device:  # a lone 1.0 line would look like a measured ratio
            fig.add_hline(y=1.0, line_dash="dash", line_color="#444", row=1, col=i)
        fig.update_yaxes(title_text=f"ratio to {escape_label(baseline)} (×)", row=1, col=i)
        fig.update_xaxes(title_text="model", row=1, col=i)
    if not has_device:
        fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, row=1, col=3)
        fig.add_annotation(
            text="no device memory on CPU",
            xref="x3 domain",
            yref="y3 domain",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"size": 14, "color": "#666"},
        )
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        barmode="group",
        title={
            "text": f"ratio to {escape_label(baseline)} (geometric mean over workloads; below 1 is better)"
        },
    )
    return fig


def startup_figure(cell_df: pd.DataFrame, colors: dict[str, str]) -> go.Figure | None:
    cell_df, colors = _escaped(cell_df), _escaped_colors(colors)
    summ = startup_summary(cell_df)
    cols = ("cold_start_ms", "startup_ms")
    if summ.empty or summ[[f"{c}_median" for c in cols]].notna().sum().sum() == 0:
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=[AXIS_LABEL[c] for c in cols])
    for series, s in summ.groupby("series", sort=False):
        for i, c in enumerate(cols, start=1):
            med = s[f"{c}_median"]
            fig.add_trace(
                go.Bar(
                    x=s["model"].tolist(),
                    y=med.tolist(),
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": (s[f"{c}_max"] - med).tolist(),
                        "arrayminus": (med - s[f"{c}_min"]).tolist(),
                        "thickness": 1,
                    },
                    name=series,
                    legendgroup=series,
                    showlegend=i == 1,
                    marker_color=colors[series],
                    hovertemplate=f"%{{y:.4g}} ms<extra>{hover_literal(series)}</extra>",
                ),
                row=1,
                col=i,
            )
    for i, c in enumerate(cols, start=1):
        # Log-axis bars start at the bottom of the range: pin it a decade below the data
        # so heights compare like on a linear axis' zero, not like an autoscaled sliver.
        lo, hi = summ[f"{c}_min"].min(), summ[f"{c}_max"].max()
        if lo > 0 and math.isfinite(lo):
            fig.update_yaxes(
                range=[math.floor(math.log10(lo)) - 1, math.log10(hi) + 0.2], row=1, col=i
            )
        fig.update_yaxes(type="log", title_text="time (ms, log scale)", row=1, col=i)
        fig.update_xaxes(title_text="model", row=1, col=i)
        label_log_axis(fig, "yaxis" if i == 1 else f"yaxis{i}", " ms")
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        barmode="group",
        title={"text": "cold start and startup (median over cells; bars span min–max)"},
    )
    return fig


def _sizes_tag(row: pd.Series) -> list[str]:
    """'r32' for an image (as ever), '128tok' for a sequence, nothing without sizes."""
    return [
        f"r{row[a]}" if a == "resolution" else f"{row[a]}{SIZE_TAGS.get(a, ' ' + a)}"
        for a in SIZE_COLUMNS
        if a in row and not pd.isna(row[a])
    ]


def verification_figure(cell_df: pd.DataFrame) -> tuple[go.Figure | None, str]:
    """Max relative error per cell against its tolerance; 'wrong' cells in red.

    Returns the figure and a note on how zero and non-finite errors are drawn.
    """
    df = _escaped(cell_df[cell_df["max_rel_err"].notna()])
    if df.empty:
        return None, ""
    err = df["max_rel_err"]
    finite_pos = err[np.isfinite(err) & (err > 0)]
    tols = df["tolerance"].dropna()
    lo_ref = min([*finite_pos.tolist(), *tols.tolist()] or [1e-6])
    hi_ref = max([*err[np.isfinite(err)].tolist(), *tols.tolist()] or [1.0])
    floor, ceiling = lo_ref / 100, max(hi_ref * 100, 1.0)
    df["y"] = err.where(err > 0, floor).where(np.isfinite(err), ceiling)
    df["shown"] = [
        "0 (exact)" if e == 0 else ("non-finite" if not math.isfinite(e) else f"{e:.2e}")
        for e in err
    ]
    df["label"] = [
        " ".join([str(r["model"]), f"b{r['batch_size']}", *_sizes_tag(r), str(r["precision"])])
        for _, r in df.iterrows()
    ]
    wrong = (df["status"] == "wrong") | (err > df["tolerance"].fillna(math.inf))
    fig = go.Figure()
    for name, part, color, symbol in (
        ("within tolerance", df[~wrong], "#009E73", "circle"),
        ("wrong (outside tolerance)", df[wrong], "#D62728", "x"),
    ):
        if part.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=part["series"].tolist(),
                y=part["y"].tolist(),
                customdata=np.column_stack(
                    [part["label"], part["shown"], part["tolerance"]]
                ).tolist(),
                mode="markers",
                name=name,
                marker={"color": color, "symbol": symbol, "size": 10, "opacity": 0.8},
                hovertemplate="%{customdata[0]}<br>max rel err %{customdata[1]}"
                " (tolerance %{customdata[2]})<extra></extra>",
            )
        )
    for tol in sorted(tols.unique()):
        fig.add_hline(
            y=tol, line_dash="dash", line_color="#D62728", annotation_text=f"tolerance {tol:g}"
        )
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        title={"text": "max relative error vs tolerance, per cell"},
        xaxis={"title": {"text": "backend"}, "type": "category"},
        yaxis={"title": {"text": AXIS_LABEL["max_rel_err"] + ", log scale"}, "type": "log"},
    )
    label_log_axis(fig, "yaxis", "")
    note = (
        f"Errors of exactly 0 are drawn at {floor:.0e}; non-finite errors (NaN or inf outputs) "
        f"at {ceiling:.0e}."
    )
    return fig, note


# Marker per quantized precision, so a rung's colour and a precision's shape read apart.
PRECISION_SYMBOLS = {"int8-dyn": "circle", "int8": "square", "w8": "diamond", "w4": "triangle-up"}
SLOWER_COLOR = "#D62728"


def _pareto_points(p: ParetoPanel, colors: dict[str, str], visible: bool) -> list[go.Scatter]:
    """One panel's points, a trace per (rung, precision): colour the rung, shape the
    precision; hollow over an fp32 cell that is not ok, a red rim when slower."""
    from stackcost.report.frames import pareto

    pts = p.points.assign(series=p.points["series"].map(escape_label))
    unit = pareto.UNIT[p.metric]
    traces = []
    for (series, precision), s in pts.groupby(["series", "precision"], sort=False):
        color = colors.get(series, "#333")
        texts = [
            quant.speedup_text(v, "ok" if t else "unstable")
            for v, t in zip(s["speedup"], s["trusted"], strict=True)
        ]
        traces.append(
            go.Scatter(
                x=s["speedup"].tolist(),
                y=s["drop"].tolist(),
                customdata=[[t] for t in texts],
                mode="markers",
                name=f"{series} · {precision}",
                visible=visible,
                marker={
                    "symbol": PRECISION_SYMBOLS.get(precision, "circle"),
                    "size": 13,
                    "color": [color if t else "white" for t in s["trusted"]],
                    "line": {
                        "width": [3 if sl else 1.5 for sl in s["slower"]],
                        "color": [SLOWER_COLOR if sl else color for sl in s["slower"]],
                    },
                },
                hovertemplate=f"%{{customdata[0]}} than fp32<br>%{{y:.3g}} {unit} lost"
                f"<extra>{hover_literal(f'{series} · {precision}')}</extra>",
            )
        )
    return traces


def _front_and_reference(p: ParetoPanel, visible: bool) -> list[go.Scatter]:
    """One panel's Pareto front, stepped from the fp32 reference, and that reference."""
    from stackcost.report.frames import pareto

    xs, ys = pareto.front_line(p)
    return [
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines",
            line={"color": "#444", "dash": "dot", "shape": "vh"},
            name="Pareto front",
            visible=visible,
            hoverinfo="skip",
        ),
        go.Scatter(
            x=[1.0],
            y=[0.0],
            mode="markers",
            marker={"symbol": "star", "size": 14, "color": "#000"},
            name=pareto.REFERENCE,
            visible=visible,
            hovertemplate="fp32: 1×, nothing lost<extra></extra>",
        ),
    ]


def _mark_slower_side(fig: go.Figure) -> None:
    """The side below 1×, shaded and named: a point there costs accuracy and buys nothing."""
    from stackcost.report.frames import pareto

    fig.add_vrect(
        x0=0,
        x1=1,
        fillcolor=SLOWER_COLOR,
        opacity=0.08,
        line_width=0,
        layer="below",
        annotation_text=pareto.SLOWER_SIDE,
        annotation_position="top left",
        annotation_font_color=SLOWER_COLOR,
    )
    fig.add_vline(x=1.0, line_dash="dash", line_color="#444")


def _pareto_axes(groups: list[ParetoPanel]) -> tuple[dict, dict]:
    """The x axis (from 0, past the fastest point) and the y axis (the quality lost, named
    for each metric the panels use), with room around the points: a marker at exactly 0
    lost must not sit half under the axis."""
    from stackcost.report.frames import pareto

    top = max(float(p.points["speedup"].max()) for p in groups)
    lo = min(0.0, *(float(p.points["drop"].min()) for p in groups))
    hi = max(0.0, *(float(p.points["drop"].max()) for p in groups))
    pad = 0.08 * (hi - lo) or 0.5
    metrics = {p.metric for p in groups}
    ylabel = pareto.Y_LABEL[next(iter(metrics))]
    if len(metrics) > 1:
        ylabel = "quality lost: " + "; ".join(pareto.Y_LABEL[m] for m in sorted(metrics))
    xaxis = {"title": {"text": pareto.X_LABEL}, "range": [0, max(2.0, top * 1.15)]}
    yaxis = {"title": {"text": ylabel}, "range": [lo - pad, hi + pad]}
    return xaxis, yaxis


def pareto_figure(summ: pd.DataFrame, colors: dict[str, str]) -> tuple[go.Figure | None, str]:
    """Speedup over the same rung's fp32 against quality lost, one point per rung ×
    precision, per model and held workload (a selector switches them); the Pareto front
    from the fp32 reference; the side below 1× shaded and named as slower. Returns the
    figure (None without a point) and pareto.note's account of what is not drawn."""
    from stackcost.report.frames import pareto

    note = pareto.note(summ)
    groups = pareto.panels(summ)
    if not groups:
        return None, note or "No quantized cell with a valid timing and an fp32 cell to divide by."
    colors = _escaped_colors(colors)
    fig = go.Figure()
    owners: list[int] = []  # which panel each trace belongs to
    for gi, p in enumerate(groups):
        visible = gi == 0
        for trace in [*_pareto_points(p, colors, visible), *_front_and_reference(p, visible)]:
            fig.add_trace(trace)
            owners.append(gi)
    labels = [p.label for p in groups]
    masks = [[o == gi for o in owners] for gi in range(len(groups))]
    _mark_slower_side(fig)
    xaxis, yaxis = _pareto_axes(groups)
    title = "speedup over fp32 vs quality lost (Pareto)"
    fig.update_layout(
        template=TEMPLATE,
        height=HEIGHT,
        title={"text": f"{title}: {escape_label(labels[0])}"},
        xaxis=xaxis,
        yaxis=yaxis,
        updatemenus=dropdown([escape_label(lab) for lab in labels], masks, title),
        margin={"t": 110},
        hovermode="closest",
    )
    return fig, note
