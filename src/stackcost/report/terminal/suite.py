"""The suite summary (frames/suite.py) as rich tables, for `stackcost suite` and
`stackcost report --suite` in the terminal.

Per (mode, precision): per backend, the geometric mean of the speedup over eager and of
the memory ratios, each with the number of workloads it is taken over; per workload, each
backend's ratio or, where it has none, its status; and the list of every (workload,
backend) left out of the means with its reason. For a quantized precision, what
quantizing buys on each rung, per workload and per rung. Text from the store (model
names, reasons) is rich Text, never markup. The page says the same (html/suite.py).
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from stackcost.report.fit import FitTable
from stackcost.report.frames.suite import (
    METRICS,
    MODE_NAMES,
    Entry,
    Row,
    SuiteSummary,
    entry_text,
    explain,
    mean_text,
    means_name,
    median_text,
    no_baseline_note,
    shows_precision,
    versus_line,
)
from stackcost.report.marks import STATUS_STYLE


def _heading(summary: SuiteSummary, mode: str, precision: str, rows: list[Row]) -> str:
    """'suite default · inference · cpu', then the precision where shows_precision."""
    heading = f"suite {summary.title} · " if summary.title else "suite · "
    heading += MODE_NAMES.get(mode, mode)
    where = sorted({r.device for r in rows if r.device})
    if where:
        heading += f" · {', '.join(where)}"
    if shows_precision(summary, precision):
        heading += f" · {precision}"
    return heading


def _slower_style(e: Entry, style: str) -> str:
    """A quantized rung slower than its fp32 reads red: a slowdown is never a plain number."""
    if e.counted and e.speedup is not None and e.speedup < 1:
        return "red"
    return style


def _table(summary: SuiteSummary, title: str, over_fp32: bool = False) -> FitTable:
    """A per-workload table that a narrow terminal narrows (report/fit.py) by hiding the
    domain, the baseline's median, then the backends' columns from the last; the
    baseline's own first where it reads 1.00× (a ratio to itself, not over fp32)."""
    base = summary.baseline
    backends = list(reversed(summary.backends))
    if not over_fp32:
        backends = [base, *(b for b in backends if b != base)]
    hint = f" or read `stackcost report --suite {summary.title}`" if summary.title else ""
    drop = ("domain", f"{base} median", *backends)
    return FitTable(title=Text(title), drop=drop, hint=hint)


def summary_renderables(summary: SuiteSummary) -> Group:
    """Every (mode, precision)'s tables, what the means leave out, and each quantized
    precision against fp32, for console.print."""
    parts: list = []
    for mode, precision in summary.groups:
        rows = summary.rows_of(mode, precision)
        cuda = any(r.device == "cuda" for r in rows)
        heading = _heading(summary, mode, precision, rows)
        no_baseline = no_baseline_note(summary, precision, rows)
        if no_baseline:
            parts.append(Text(f"{heading}: {no_baseline}"))
            continue
        means = FitTable(title=Text(f"{heading}: geometric means vs {summary.baseline}"))
        means.add_column("backend", justify="left")
        for label in METRICS.values():
            means.add_column(Text(label), justify="right")
        for b in summary.backends:
            means.add_row(
                Text(b), *(Text(mean_text(summary, mode, b, m, cuda, precision)) for m in METRICS)
            )
        parts.append(means)
        metrics = ["speedup", "cpu_memory"]
        if summary.has_device_memory:
            metrics.append("device_memory")
        for metric in metrics:
            table = _table(summary, f"{heading}: {METRICS[metric]} vs {summary.baseline}")
            table.add_column("workload", justify="left", overflow="fold")
            table.add_column("domain", justify="left")
            if metric == "speedup":
                table.add_column(Text(f"{summary.baseline} median"), justify="right")
            for b in summary.backends:
                table.add_column(Text(b), justify="right")
            for r in rows:
                base = r.entries[summary.baseline]
                cells = [Text(r.label), Text(r.domain)]
                if metric == "speedup":
                    cells.append(Text(median_text(base), style="dim" if base.disturbed else ""))
                for b in summary.backends:
                    text, style = entry_text(r.entries[b], metric, r.device)
                    cells.append(Text(text, style=style))
                table.add_row(*cells)
            parts.append(table)
        left_out = summary.not_counted(mode, precision)
        if left_out:
            parts.append(Text(f"Not in the {means_name(summary, mode, precision)}:", style="bold"))
            for r, b, e in left_out:
                line = Text(f"  {r.label} · {b}: ")
                line.append(e.status, style=STATUS_STYLE.get(e.status, "red"))
                if e.reason and e.reason != e.status:
                    line.append(f" — {e.reason}", style="dim")
                parts.append(line)
    for mode in summary.modes:
        for precision in summary.quantized(mode):
            parts.extend(_versus_renderables(summary, mode, precision))
    for note in explain(summary):
        parts.append(Text(note, style="dim"))
    return Group(*parts)


def _versus_renderables(summary: SuiteSummary, mode: str, precision: str) -> list:
    """One quantized precision against fp32 on each rung: per workload, then per rung."""
    rows = summary.rows_of(mode, precision)
    heading = _heading(summary, mode, precision, rows)
    table = _table(summary, f"{heading}: speedup over fp32 on the same backend", over_fp32=True)
    table.add_column("workload", justify="left", overflow="fold")
    table.add_column("domain", justify="left")
    for b in summary.backends:
        table.add_column(Text(b), justify="right")
    for r in rows:
        cells = [Text(r.workload or r.label), Text(r.domain)]
        for b in summary.backends:
            e = r.versus_fp32[b]
            text, style = entry_text(e, "speedup", r.device)
            cells.append(Text(text, style=_slower_style(e, style)))
        table.add_row(*cells)
    parts: list = [table, Text(f"{precision} vs fp32, per backend:", style="bold")]
    for b in summary.backends:
        g = summary.versus_fp32(mode, precision, b)
        style = "red" if g.value is not None and g.value < 1 else ""
        parts.append(Text(f"  {versus_line(summary, mode, precision, b)}", style=style))
    return parts
