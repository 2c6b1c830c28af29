"""The page's training section: accuracy against time, final accuracy, time per sample, and
loader against step time, per backend, from the epochs of `stackcost train` runs; and how
closely each level's first losses follow eager's (frames/train.py)."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from stackcost.backends import BASELINE
from stackcost.report.frames.train import (
    STEPS,
    TOLERANCE_TEXT,
    TOLERANCES,
    agreement,
    eager_twin,
    epochs_frame,
    first_losses,
    relative,
)
from stackcost.report.html.plots import label_log_axis
from stackcost.report.html.slots import Figures
from stackcost.report.style import PALETTE
from stackcost.store.runs import RunResult


def _series(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    # Entity-escaped: plotly renders label markup, and these strings come from the store.
    label = (df["model"] + " · " + df["backend"]).map(html.escape)
    if df["run_id"].nunique() > 1:
        label = label + " (" + df["run_id"] + ")"
    return list(df.assign(series=label).groupby("series", sort=False))


def accuracy_figure(df: pd.DataFrame, colors: list[str]) -> go.Figure:
    """Eval accuracy against time in units of epoch × that backend's mean epoch time (the
    abstraction-cost study's axis): mean line and min–max band over repetitions."""
    fig = go.Figure()
    for i, (name, part) in enumerate(_series(df)):
        color = colors[i % len(colors)]
        unit = part["epoch_s"].mean()
        by_epoch = part.groupby("epoch")["eval_accuracy"].agg(["mean", "min", "max"]).reset_index()
        x = by_epoch["epoch"] * unit
        fig.add_trace(
            go.Scatter(
                x=list(x) + list(x[::-1]),
                y=list(by_epoch["max"] * 100) + list(by_epoch["min"][::-1] * 100),
                fill="toself",
                line={"width": 0},
                fillcolor=color,
                opacity=0.2,
                hoverinfo="skip",
                showlegend=False,
                legendgroup=name,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=by_epoch["mean"] * 100,
                mode="lines+markers",
                name=name,
                legendgroup=name,
                line={"color": color},
                hovertemplate="epoch %{customdata}<br>%{x:.1f} s<br>%{y:.1f}%<extra>"
                + name
                + "</extra>",
                customdata=by_epoch["epoch"],
            )
        )
    fig.update_layout(
        title="held-out accuracy against time (epoch × mean epoch time)",
        xaxis_title="time (s) = epoch × mean epoch time of the backend",
        yaxis_title="eval accuracy (%)",
        yaxis_range=[0, 100],
        template="plotly_white",
        height=420,
    )
    return fig


def summary_figure(df: pd.DataFrame, colors: list[str]) -> go.Figure:
    """Final accuracy, time per sample (train, eval) and loader vs step time, per backend."""
    last = df[
        df["epoch"]
        == df.groupby(["run_id", "model", "backend", "repetition"])["epoch"].transform("max")
    ]
    per = []
    for name, part in _series(df):
        final = last[last.index.isin(part.index)]
        per.append(
            {
                "series": name,
                "final": final["eval_accuracy"].mean() * 100,
                "final_min": final["eval_accuracy"].min() * 100,
                "final_max": final["eval_accuracy"].max() * 100,
                "train_ms": 1e3 / part["train_samples_per_s"].median(),
                "eval_ms": 1e3 / part["eval_samples_per_s"].median()
                if part["eval_samples_per_s"].notna().any()
                else None,
                "loader": part["loader_wait_s"].sum() / part["epoch"].count(),
                "step": part["step_s"].sum() / part["epoch"].count(),
            }
        )
    s = pd.DataFrame(per)
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(
            "final eval accuracy (%)",
            "time per sample (ms)",
            "loader wait vs step (s per epoch)",
        ),
    )
    palette = [colors[i % len(colors)] for i in range(len(s))]
    fig.add_trace(
        go.Bar(
            x=s["series"],
            y=s["final"],
            marker_color=palette,
            showlegend=False,
            error_y={
                "type": "data",
                "symmetric": False,
                "array": s["final_max"] - s["final"],
                "arrayminus": s["final"] - s["final_min"],
            },
        ),
        1,
        1,
    )
    fig.add_trace(
        go.Bar(x=s["series"], y=s["train_ms"], name="train", marker_color="#4c78a8"), 1, 2
    )
    fig.add_trace(go.Bar(x=s["series"], y=s["eval_ms"], name="eval", marker_color="#f58518"), 1, 2)
    fig.add_trace(
        go.Bar(x=s["series"], y=s["loader"], name="loader wait", marker_color="#e45756"), 1, 3
    )
    fig.add_trace(
        go.Bar(x=s["series"], y=s["step"], name="step (fwd+bwd+opt)", marker_color="#54a24b"), 1, 3
    )
    fig.update_layout(barmode="group", template="plotly_white", height=420)
    fig.update_yaxes(range=[0, 100], row=1, col=1)
    return fig


def agreement_figure(runs: list[RunResult], colors: list[str]) -> tuple[go.Figure | None, str]:
    """Each level's relative difference from eager's loss, step by step over the first
    recorded steps (log scale), with the tolerance over the steps it is checked on; and a
    note naming each level's verdict. None when no level has an eager twin to compare."""
    fig = go.Figure()
    verdicts: list[str] = []
    for run in runs:
        cells = [c for c in run.cells() if c.cell.mode == "train"]
        for c in cells:
            if c.cell.backend == BASELINE:
                continue
            eager = eager_twin(c, cells)
            found = agreement(c, eager)
            label = f"{c.cell.model.name} · {c.cell.backend}"
            verdicts.append(f"{label}: {found.label()}")  # the template escapes notes
            name = html.escape(label)  # plotly renders markup in trace names
            if eager is None or not found.diffs:
                continue
            diffs = relative(first_losses(c), first_losses(eager))
            fig.add_trace(
                go.Scatter(
                    x=list(range(1, len(diffs) + 1)),
                    # A difference of exactly 0 has no place on a log axis: drawn at 1e-9.
                    y=[max(d, 1e-9) for d in diffs],
                    mode="lines+markers",
                    name=name,
                    line={"color": colors[len(fig.data) % len(colors)]},
                )
            )
    if not fig.data:  # nothing drawn: the verdicts say why
        return None, "; ".join(verdicts)
    fig.add_trace(
        go.Scatter(
            x=list(range(1, STEPS + 1)),
            y=list(TOLERANCES),
            mode="lines",
            line={"dash": "dash", "color": "#888", "shape": "hv"},
            name="tolerance",
        )
    )
    fig.update_layout(
        title=f"first steps: relative difference from eager's loss (judged over steps "
        f"1–{STEPS}: {TOLERANCE_TEXT})",
        xaxis_title="training step",
        yaxis_title="|loss − eager's| / eager's",
        yaxis_type="log",
        template="plotly_white",
        height=380,
    )
    label_log_axis(fig, "yaxis", "")  # 1e-4, not plotly's SI "100µ" nor a bare "2"
    return fig, "; ".join(verdicts)


def training_slots(runs: list[RunResult], figs: Figures) -> dict[str, dict[str, str]] | None:
    """The training section's figure slots; None without a training epoch."""
    epochs = epochs_frame(runs)
    if not len(epochs):
        return None
    return {
        "accuracy": figs.add(accuracy_figure(epochs, list(PALETTE))),
        "summary": figs.add(summary_figure(epochs, list(PALETTE))),
        "agreement": figs.add(*agreement_figure(runs, list(PALETTE))),
    }
