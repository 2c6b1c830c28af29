"""A metric over the stored runs, one series per cell, with its change points.

Every measured point is kept and carries its cell's status; change points are found over
the `ok` points only. An `unstable` or `disturbed` point is no baseline (as in compare):
it is shown marked, and a step right after such points says it may have started at any
of them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stackcost.cell import Cell
from stackcost.compare.diff import METRICS, repetition_values, status_reason
from stackcost.compare.steps import Step, detect_steps
from stackcost.result import MEASURED_STATUSES, TRUSTED_STATUSES
from stackcost.store.runs import RunResult

# How the figure marks points that decide no change point: hollow unstable, crossed disturbed.
UNTRUSTED_MARKERS = {"unstable": "o", "disturbed": "x"}
UNTRUSTED_LEGEND = (
    "hollow: unstable, ×: disturbed (other processes used the cores): shown, not used for "
    "change points"
)


@dataclass
class Point:
    run_id: str
    started_at: str
    label: str  # commit or version: what the x axis shows
    value: float
    status: str = "ok"  # the cell's status in that run: ok, unstable or disturbed
    reason: str = ""  # why it is not ok

    @property
    def trusted(self) -> bool:
        return self.status in TRUSTED_STATUSES


@dataclass
class Series:
    cell: Cell
    metric: str
    points: list[Point] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)  # indices into points, all trusted

    @property
    def regressions(self) -> list[Step]:
        higher_is_better = METRICS[self.metric][1]
        return [s for s in self.steps if (s.change < 0) == higher_is_better]

    @property
    def untrusted(self) -> list[Point]:
        return [p for p in self.points if not p.trusted]

    def untrusted_before(self, step: Step) -> list[Point]:
        """The untrusted points just before the step's first point: it may start at any."""
        out: list[Point] = []
        for p in reversed(self.points[: step.index]):
            if p.trusted:
                break
            out.insert(0, p)
        return out


def trusted_steps(points: list[Point], alpha: float, min_change: float) -> list[Step]:
    """Change points over the trusted points, indexed into `points`."""
    kept = [i for i, p in enumerate(points) if p.trusted]
    steps = detect_steps([points[i].value for i in kept], alpha=alpha, min_change=min_change)
    return [replace(s, index=kept[s.index]) for s in steps]


def untrusted_summary(series: list[Series]) -> list[str]:
    """One line per series with untrusted points, for the terminal."""
    lines = []
    for s in series:
        if bad := s.untrusted:
            statuses = [p.status for p in bad]
            counts = ", ".join(f"{statuses.count(k)} {k}" for k in sorted(set(statuses)))
            lines.append(
                f"{s.cell.label()}: {len(bad)} of {len(s.points)} points untrusted ({counts}), "
                "shown marked and not used for change points"
            )
    return lines


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

    from stackcost.store.database import Store

    series: dict[str, Series] = {}
    with Store(db, read_only=True) as store:
        for run_id in store.run_ids():  # ordered by started_at
            row = store.run_row(run_id)
            env = json.loads(row["env_json"])
            run = RunResult(
                run_id, Path(db), env, {}, list(store.repetitions(run_id, with_samples=False))
            )
            for cell in run.cells():
                if cell.status not in MEASURED_STATUSES or not where(cell.cell):
                    continue
                # The stored median stands in for the samples (not loaded: history is wide).
                values = [statistics.median(v) for v in repetition_values(cell, metric)]
                if not values:
                    continue
                s = series.setdefault(cell.cell.key(), Series(cell.cell, metric))
                point = Point(
                    run_id,
                    row["started_at"],
                    run_label(row, env, label),
                    statistics.median(values),
                    cell.status,
                    status_reason(cell) if not cell.trusted else "",
                )
                s.points.append(point)
    for s in series.values():
        s.steps = trusted_steps(s.points, alpha, min_change)
    return list(series.values())


def figure(series: list[Series], metric: str, path: Path | None = None) -> Any:
    """A matplotlib figure, one line per cell, change points marked; saved when path is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for s in series:
        xs = [i for i, p in enumerate(s.points) if p.trusted]
        ys = [s.points[i].value for i in xs]
        (line,) = ax.plot(xs, ys, marker="o", ms=3, label=s.cell.label())
        for status, marker in UNTRUSTED_MARKERS.items():
            if bad := [(i, p.value) for i, p in enumerate(s.points) if p.status == status]:
                bx, by = zip(*bad, strict=True)
                ax.scatter(bx, by, marker=marker, s=30, color=line.get_color(), zorder=3)
                if marker == "o":  # hollow: an outline in the series' colour
                    ax.collections[-1].set_facecolor("none")
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
    if any(s.untrusted for s in series):
        ax.set_title(UNTRUSTED_LEGEND, fontsize=8, loc="left")
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

    def earlier(s: Series, st: Step) -> str:
        before = s.untrusted_before(st)
        return ", ".join(f"{p.label} ({p.status})" for p in before) or ""

    rows = "".join(
        f"<tr><td>{h.escape(s.cell.label())}</td><td>{h.escape(s.points[st.index].label)}</td>"
        f"<td>{h.escape(s.points[st.index].run_id)}</td><td>{st.before:.4g} → {st.after:.4g}</td>"
        f"<td>{st.change:+.1%}</td><td>{'regression' if st in s.regressions else 'improvement'}</td>"
        f"<td>{h.escape(earlier(s, st))}</td></tr>"
        for s in series
        for st in s.steps
    )
    untrusted = "".join(
        f"<tr><td>{h.escape(s.cell.label())}</td><td>{h.escape(p.label)}</td>"
        f"<td>{h.escape(p.run_id)}</td><td>{p.value:.4g}</td><td>{h.escape(p.status)}</td>"
        f"<td>{h.escape(p.reason)}</td></tr>"
        for s in series
        for p in s.untrusted
    )
    untrusted_table = (
        f"<h2>Untrusted points</h2><p>{h.escape(UNTRUSTED_LEGEND)}</p>"
        "<table border=1 cellpadding=4><tr><th>cell</th><th>point</th><th>run</th>"
        f"<th>value</th><th>status</th><th>why</th></tr>{untrusted}</table>"
        if untrusted
        else ""
    )
    return (
        "<!doctype html><meta charset=utf-8><title>stackcost history</title>"
        f"<h1>{h.escape(metric)} over runs</h1><img alt='history' src='data:image/png;base64,{img}'>"
        "<h2>Change points</h2><table border=1 cellpadding=4><tr><th>cell</th><th>starts at</th>"
        f"<th>run</th><th>level</th><th>change</th><th>kind</th>"
        f"<th>or earlier, at an untrusted point</th></tr>{rows}</table>{untrusted_table}"
    )
