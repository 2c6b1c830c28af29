"""A comparison as a terminal table, as markdown fit for a pull-request comment, and as JSON."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text

from stackcost.compare.diff import CellComparison, Comparison
from stackcost.compare.stats import MIN_REPETITIONS, MetricComparison

ORDER = (
    "regressed",
    "newly failing",
    "untrusted base",
    "untrusted candidate",
    "too few repetitions",
    "noisy",
    "improved",
    "fixed",
    "new",
    "missing",
    "unchanged",
)
ICON = {
    "regressed": "🔴",
    "newly failing": "❌",
    "untrusted base": "⚠️",
    "untrusted candidate": "⚠️",
    "too few repetitions": "🔁",
    "noisy": "🟡",
    "improved": "🟢",
    "fixed": "✅",
    "new": "🆕",
    "missing": "⚪",
    "unchanged": "",
}
STYLE = {
    "regressed": "red",
    "newly failing": "red",
    "improved": "green",
    "noisy": "yellow",
    "too few repetitions": "yellow",
    "untrusted base": "magenta",
    "untrusted candidate": "magenta",
}
# Cells with no verdict, and what to do about them: the gate passes, the output says why.
ADVICE = {
    "too few repetitions": (
        "{n} cell(s) changed beyond the threshold with fewer than {min} repetitions a side: "
        "no verdict, because iterations inside one process are correlated and only "
        "repetitions count as samples. Run both sides with --repeats {min} or more."
    ),
    "untrusted base": (
        "{n} cell(s) have an unstable or disturbed baseline, which is no baseline: no "
        "verdict. Measure the baseline again until those cells are ok."
    ),
    "untrusted candidate": (
        "{n} cell(s) were disturbed in the candidate (other processes used the cores): no "
        "verdict. Measure them again on a quiet machine."
    ),
    "noisy": (
        "{n} cell(s) changed beyond the threshold, but not clearly beyond the repetitions' "
        "spread or the ±{spread:.0%} two stored runs of identical code drift apart on a "
        "small shared machine: no verdict. Measure base and candidate interleaved in one "
        "session to see below that: stackcost ab MODEL --base ... --cand ..."
    ),
}


def stored_runs_line(spread: float) -> str:
    """Said under every stored-run comparison: what it cannot do, and what can."""
    return (
        "Two stored runs were measured at different times: a timing change within "
        f"±{spread:.0%} may be the machine's drift, which this comparison cannot separate "
        "from a change. For a gate, measure interleaved: stackcost ab."
    )


UNITS = {"latency": "ms", "throughput": "/s", "peak_memory": "MiB", "cold_start": "ms"}
# What a narrow terminal hides first (report/fit.py, applied where the table is printed).
DROP = ("cold start (ms)", "p", "peak RSS (MiB)", "throughput (/s)")


def _value(m: MetricComparison, v: float) -> str:
    return f"{v / 2**20:.1f}" if m.metric == "peak_memory" else f"{v:.4g}"


def _p(m: MetricComparison) -> str:
    if not m.enough_repetitions:
        return "—"  # the pooled p-value is not evidence here: don't show it as if it were
    # Only the test over repetitions is evidence; the pooled iterations' p decides nothing.
    p = m.p_repetitions if m.decided_by == "repetitions" else None
    return "—" if p is None else f"{p:.2g}"


def _metric_cell(m: MetricComparison | None) -> str:
    if m is None:
        return "—"
    return f"{_value(m, m.baseline)} → {_value(m, m.candidate)} ({m.change:+.1%})"


def _sorted(cmp: Comparison) -> list[CellComparison]:
    return sorted(cmp.cells, key=lambda c: ORDER.index(c.verdict))


def summary_line(cmp: Comparison) -> str:
    counts = [f"{cmp.count(v)} {v}" for v in ORDER if cmp.count(v)]
    return ", ".join(counts) or "no cells"


def advice(cmp: Comparison) -> list[str]:
    """One sentence per kind of cell left without a verdict, saying what to do."""
    return [
        text.format(n=n, min=MIN_REPETITIONS, spread=cmp.spread)
        for verdict, text in ADVICE.items()
        if (n := cmp.count(verdict))
    ]


def _why(c: CellComparison) -> str:
    bad = [m.metric for m in c.metrics if m.verdict == c.verdict and c.verdict != "unchanged"]
    return "; ".join(filter(None, [", ".join(bad), c.note]))


def table(cmp: Comparison) -> Table:
    t = Table(
        title=f"{cmp.baseline} → {cmp.candidate}",
        title_justify="left",
        caption="\n".join(advice(cmp)) or None,
        caption_justify="left",
    )
    for col in ("cell", "verdict", "latency (ms)", "p", "throughput (/s)", "peak RSS (MiB)"):
        t.add_column(
            col, justify="left" if col in ("cell", "verdict") else "right", no_wrap=col != "cell"
        )
    t.add_column("cold start (ms)", justify="right")
    t.add_column("why")
    for c in _sorted(cmp):
        lat = c.metric("latency")
        t.add_row(
            Text(c.cell.label()),
            Text(c.verdict, style=STYLE.get(c.verdict, "")),
            _metric_cell(lat),
            _p(lat) if lat else "—",
            _metric_cell(c.metric("throughput")),
            _metric_cell(c.metric("peak_memory")),
            _metric_cell(c.metric("cold_start")),
            Text(_why(c)),  # reasons are foreign text: never read as markup
        )
    return t


def markdown(cmp: Comparison, thresholds: dict[str, float], alpha: float) -> str:
    head = "❌ **Performance regression**" if cmp.failed else "✅ **No performance regression**"
    header = (
        "| | cell | verdict | latency (ms) | throughput (/s) | peak RSS (MiB) | cold start (ms) |"
    )
    rule = "|---|---|---|---:|---:|---:|---:|"
    lines = [
        f"{head}: {summary_line(cmp)}",
        "",
        f"Baseline `{cmp.baseline}`, candidate `{cmp.candidate}`. A cell regresses when a "
        f"metric is worse by more than its threshold ({_thresholds(thresholds)}), the "
        f"repetitions are significantly apart (exact Mann-Whitney U over repetition "
        f"medians, α = {alpha:g}, or complete separation at {MIN_REPETITIONS} a side; at "
        f"least {MIN_REPETITIONS} repetitions a side), and a timing moved by more than "
        f"the ±{cmp.spread:.0%} between-run spread, over an `ok` baseline.",
        "",
        f"> {stored_runs_line(cmp.spread)}",
        "",
        *[part for line in advice(cmp) for part in (f"> ⚠️ {line}", "")],
        header,
        rule,
    ]
    changed = [c for c in _sorted(cmp) if c.verdict != "unchanged"]
    same = [c for c in _sorted(cmp) if c.verdict == "unchanged"]

    def row(c: CellComparison) -> str:
        cols = [_metric_cell(c.metric(m)) for m in UNITS]
        verdict = c.verdict + (f" ({c.note})" if c.note else "").replace("|", "\\|")
        return f"| {ICON[c.verdict]} | `{c.cell.label()}` | {verdict} | " + " | ".join(cols) + " |"

    lines += [row(c) for c in changed]
    if same:
        if changed:
            lines += ["", f"<details><summary>{len(same)} unchanged cells</summary>", ""]
            lines += [header, rule] + [row(c) for c in same] + ["", "</details>"]
        else:
            lines += [row(c) for c in same]
    return "\n".join(lines) + "\n"


def _thresholds(thresholds: dict[str, float]) -> str:
    default = thresholds.get("default", 0.07)
    extra = [f"{k} {v:.0%}" for k, v in thresholds.items() if k != "default"]
    return f"{default:.0%}" + (f"; {', '.join(extra)}" if extra else "")


def as_json(cmp: Comparison, thresholds: dict[str, float], alpha: float) -> str:
    """The comparison for machines: the gate's outcome, the advice, every cell's verdict."""
    payload: dict[str, Any] = {
        "baseline": cmp.baseline,
        "candidate": cmp.candidate,
        "failed": cmp.failed,
        "summary": summary_line(cmp),
        "advice": advice(cmp),
        "thresholds": thresholds,
        "alpha": alpha,
        "min_repetitions": MIN_REPETITIONS,
        "cells": [
            {
                "cell": c.cell.label(),
                "key": c.cell.key(),
                "verdict": c.verdict,
                "note": c.note,
                "metrics": [m.as_dict() for m in c.metrics],
            }
            for c in _sorted(cmp)
        ],
    }
    return json.dumps(payload, indent=2)
