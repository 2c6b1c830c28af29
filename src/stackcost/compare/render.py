"""A comparison as a terminal table and as markdown fit for a pull-request comment."""

from __future__ import annotations

from rich.table import Table

from stackcost.compare.diff import CellComparison, Comparison
from stackcost.compare.stats import MetricComparison

ORDER = ("regressed", "newly failing", "noisy", "improved", "fixed", "new", "missing", "unchanged")
ICON = {
    "regressed": "🔴",
    "newly failing": "❌",
    "noisy": "🟡",
    "improved": "🟢",
    "fixed": "✅",
    "new": "🆕",
    "missing": "⚪",
    "unchanged": "",
}
STYLE = {"regressed": "red", "newly failing": "red", "improved": "green", "noisy": "yellow"}
UNITS = {"latency": "ms", "throughput": "/s", "peak_memory": "MiB", "cold_start": "ms"}


def _value(m: MetricComparison, v: float) -> str:
    return f"{v / 2**20:.1f}" if m.metric == "peak_memory" else f"{v:.4g}"


def _p(m: MetricComparison) -> str:
    p = m.p_repetitions if m.decided_by == "repetitions" else m.p_samples
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


def table(cmp: Comparison) -> Table:
    t = Table(title=f"{cmp.baseline} → {cmp.candidate}", title_justify="left")
    for col in ("cell", "verdict", "latency (ms)", "p", "throughput (/s)", "peak RSS (MiB)"):
        t.add_column(
            col, justify="left" if col in ("cell", "verdict") else "right", no_wrap=col != "cell"
        )
    t.add_column("cold start (ms)", justify="right")
    t.add_column("why")
    for c in _sorted(cmp):
        lat = c.metric("latency")
        bad = [m.metric for m in c.metrics if m.verdict == c.verdict and c.verdict != "unchanged"]
        t.add_row(
            c.cell.label(),
            f"[{STYLE.get(c.verdict, '')}]{c.verdict}[/]" if c.verdict in STYLE else c.verdict,
            _metric_cell(lat),
            _p(lat) if lat else "—",
            _metric_cell(c.metric("throughput")),
            _metric_cell(c.metric("peak_memory")),
            _metric_cell(c.metric("cold_start")),
            c.note or ", ".join(bad),
        )
    return t


def markdown(cmp: Comparison, thresholds: dict[str, float], alpha: float) -> str:
    head = "❌ **Performance regression**" if cmp.failed else "✅ **No performance regression**"
    lines = [
        f"{head}: {summary_line(cmp)}",
        "",
        f"Baseline `{cmp.baseline}`, candidate `{cmp.candidate}`. A cell regresses when a "
        f"metric is worse by more than its threshold ({_thresholds(thresholds)}) and the "
        f"difference is significant (Mann-Whitney U, α = {alpha:g}).",
        "",
        "| | cell | verdict | latency (ms) | throughput (/s) | peak RSS (MiB) | cold start (ms) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    changed = [c for c in _sorted(cmp) if c.verdict != "unchanged"]
    same = [c for c in _sorted(cmp) if c.verdict == "unchanged"]

    def row(c: CellComparison) -> str:
        cols = [_metric_cell(c.metric(m)) for m in UNITS]
        verdict = c.verdict + (f" ({c.note})" if c.note else "")
        return f"| {ICON[c.verdict]} | `{c.cell.label()}` | {verdict} | " + " | ".join(cols) + " |"

    lines += [row(c) for c in changed]
    if same:
        if changed:
            lines += ["", f"<details><summary>{len(same)} unchanged cells</summary>", ""]
            lines += lines[4:6] + [row(c) for c in same] + ["", "</details>"]
        else:
            lines += [row(c) for c in same]
    return "\n".join(lines) + "\n"


def _thresholds(thresholds: dict[str, float]) -> str:
    default = thresholds.get("default", 0.07)
    extra = [f"{k} {v:.0%}" for k, v in thresholds.items() if k != "default"]
    return f"{default:.0%}" + (f"; {', '.join(extra)}" if extra else "")
