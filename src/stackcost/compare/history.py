"""A metric over the stored runs, one series per cell, with its change points."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stackcost.cell import Cell
from stackcost.compare.diff import METRICS
from stackcost.compare.steps import Step, detect_steps
from stackcost.runs import RunResult


@dataclass
class Point:
    run_id: str
    started_at: str
    label: str  # commit or version: what the x axis shows
    value: float


@dataclass
class Series:
    cell: Cell
    metric: str
    points: list[Point] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    @property
    def regressions(self) -> list[Step]:
        _, higher_is_better = METRICS[self.metric]
        return [s for s in self.steps if (s.change < 0) == higher_is_better]


def run_label(row: Any, env: dict[str, Any], label: str) -> str:
    """'commit' (short hash, '+' when dirty), 'version:PKG' or 'run'."""
    if label.startswith("version:"):
        pkg = label.split(":", 1)[1]
        return str((env.get("versions") or {}).get(pkg) or env.get(pkg) or "?")
    if label == "commit":
        git = env.get("project_git") or env.get("stackcost_git") or {}
        commit = row["git_commit"] or git.get("commit")
        if commit:
            return commit[:8] + ("+" if git.get("dirty") else "")
    return row["id"]


def load_history(
    db: str | Path,
    metric: str,
    where: Callable[[Cell], bool] = lambda c: True,
    label: str = "commit",
    alpha: float = 0.01,
    min_change: float = 0.02,
) -> list[Series]:
    """Series of `metric` per matching cell, runs ordered by start time."""
    import json

    from stackcost.store import Store

    extract, _ = METRICS[metric]
    series: dict[str, Series] = {}
    with Store(db) as store:
        for run_id in store.run_ids():  # ordered by started_at
            row = store.run_row(run_id)
            env = json.loads(row["env_json"])
            run = RunResult(
                run_id, Path(db), env, {}, list(store.repetitions(run_id, with_samples=False))
            )
            for cell in run.cells():
                if not cell.valid or not where(cell.cell):
                    continue
                # The stored median stands in for the samples (not loaded: history is wide).
                values = [
                    statistics.median(v) for r in cell.repetitions if r.valid and (v := extract(r))
                ]
                if not values:
                    continue
                s = series.setdefault(cell.cell.key(), Series(cell.cell, metric))
                point = Point(
                    run_id, row["started_at"], run_label(row, env, label), statistics.median(values)
                )
                s.points.append(point)
    for s in series.values():
        s.steps = detect_steps([p.value for p in s.points], alpha=alpha, min_change=min_change)
    return list(series.values())


def figure(series: list[Series], metric: str, path: Path | None = None) -> Any:
    """A matplotlib figure, one line per cell, change points marked; saved when path is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for s in series:
        xs = range(len(s.points))
        (line,) = ax.plot(xs, [p.value for p in s.points], marker="o", ms=3, label=s.cell.label())
        for st in s.steps:
            ax.axvline(st.index - 0.5, color=line.get_color(), ls="--", lw=1)
            ax.annotate(
                f"{st.change:+.0%}", (st.index - 0.5, st.after), color=line.get_color(), fontsize=8
            )
    longest = max(series, key=lambda s: len(s.points), default=None)
    if longest is not None:
        ax.set_xticks(range(len(longest.points)))
        ax.set_xticklabels([p.label for p in longest.points], rotation=60, fontsize=7, ha="right")
    ax.set_ylabel(
        {
            "latency": "median latency (ms)",
            "throughput": "throughput (samples/s)",
            "peak_memory": "peak RSS (bytes)",
            "cold_start": "cold start (ms)",
        }[metric]
    )
    ax.set_xlabel("run (oldest → newest)")
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def html(series: list[Series], metric: str) -> str:
    """A self-contained page: the figure inline and the detected regressions."""
    import base64
    import html as h
    import io

    import matplotlib.pyplot as plt

    fig = figure(series, metric)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    img = base64.b64encode(buf.getvalue()).decode()
    rows = "".join(
        f"<tr><td>{h.escape(s.cell.label())}</td><td>{h.escape(s.points[st.index].label)}</td>"
        f"<td>{h.escape(s.points[st.index].run_id)}</td><td>{st.before:.4g} → {st.after:.4g}</td>"
        f"<td>{st.change:+.1%}</td><td>{'regression' if st in s.regressions else 'improvement'}</td></tr>"
        for s in series
        for st in s.steps
    )
    return (
        "<!doctype html><meta charset=utf-8><title>stackcost history</title>"
        f"<h1>{h.escape(metric)} over runs</h1><img alt='history' src='data:image/png;base64,{img}'>"
        "<h2>Change points</h2><table border=1 cellpadding=4><tr><th>cell</th><th>starts at</th>"
        f"<th>run</th><th>level</th><th>change</th><th>kind</th></tr>{rows}</table>"
    )
