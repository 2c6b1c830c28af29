"""The suite summary (stackcost.suite.SuiteSummary) as rich tables and as an HTML fragment.

Both say the same things: per backend, the geometric mean of the speedup over eager and of
the memory ratios, each with the number of workloads it is taken over; per workload, each
backend's ratio or, where it has none, its status; and the list of every (workload,
backend) left out of the means with its reason. Each precision is its own table. For a
quantized precision, what quantizing buys on each rung: the rung's fp32 median over its
quantized one per workload, and one line per rung with the geometric mean (read out as
faster or slower, never a bare number below 1), how many models it covers and which it
does not, with why. Text from the store (model names, reasons) is never markup: rich Text
in the terminal, escaped in HTML.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text

from stackcost.axes import QUANTIZED
from stackcost.backends import BASELINE
from stackcost.report.fit import FitTable
from stackcost.report.marks import DISTURBED_MARK, STATUS_STYLE, UNTRUSTED_BASE_MARK
from stackcost.report.suite_data import Entry, Row, SuiteSummary, summarize
from stackcost.report.units import ms
from stackcost.runspec.suite import Expected

if TYPE_CHECKING:
    from stackcost.store.runs import RunResult

METRICS = {
    "speedup": "speedup",
    "cpu_memory": "CPU memory",
    "device_memory": "device memory",
}
MODE_NAMES = {"infer": "inference", "train": "training"}


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _shows_precision(summary: SuiteSummary, precision: str) -> bool:
    """A table names its precision unless every table is fp32 (the suites before)."""
    return precision != "fp32" or len(summary.groups) > len(summary.modes)


def _heading(summary: SuiteSummary, mode: str, precision: str, rows: list[Row]) -> str:
    """'suite default · inference · cpu', then the precision where _shows_precision."""
    heading = f"suite {summary.title} · " if summary.title else "suite · "
    heading += MODE_NAMES.get(mode, mode)
    where = sorted({r.device for r in rows if r.device})
    if where:
        heading += f" · {', '.join(where)}"
    if _shows_precision(summary, precision):
        heading += f" · {precision}"
    return heading


def _versus(value: float | None, precision: str) -> str:
    """A geomean of fp32 / quantized, read out: a value below 1 says slower, in words."""
    if value is None:
        return "no geomean"
    if value > 1:
        return f"{value:.2f}× geomean, faster than fp32"
    if value < 1:
        return (
            f"{value:.2f}× geomean, slower than fp32 ({precision} takes {1 / value:.2f}× its time)"
        )
    return f"{value:.2f}× geomean, as fast as fp32"


def versus_line(summary: SuiteSummary, mode: str, precision: str, backend: str) -> str:
    """'int8 on onnxruntime: 1.70× geomean, faster than fp32, over 3 of 4 models;
    1 unsupported: bert-base b1 128 tokens (why)'."""
    g = summary.versus_fp32(mode, precision, backend)
    text = f"{precision} on {backend}: {_versus(g.value, precision)}, over {g.n} of {g.of} models"
    wide = summary.versus_fp32(mode, precision, backend, indicative=True)
    if wide.n > g.n:
        text += f" ({_ratio(wide.value)}{UNTRUSTED_BASE_MARK} over {wide.n} with unstable ones)"
    left: dict[str, list[str]] = {}
    for r, e in summary.not_versus_fp32(mode, precision, backend):
        kind = "indicative" if e.indicative else e.shown
        why = f" ({e.reason})" if e.reason and e.reason != e.status else ""
        left.setdefault(kind, []).append(f"{r.workload or r.label}{why}")
    for kind, names in left.items():
        text += f"; {len(names)} {kind}: {', '.join(names)}"
    return text


def _mean(
    summary: SuiteSummary,
    mode: str,
    backend: str,
    metric: str,
    cuda: bool,
    precision: str | None = None,
) -> str:
    """'1.42× over 2/6', '— over 0/6' when no workload counts, then, where unstable
    cells add to it, the indicative mean: '1.42× over 2/6 · 1.30×? over 6/6'; '—' for
    device memory where nothing ran on a GPU."""
    if metric == "device_memory" and not cuda:
        return "—"
    g = summary.geomean(mode, backend, metric, precision=precision)
    text = f"{_ratio(g.value)} over {g.n}/{g.of}"
    wide = summary.geomean(mode, backend, metric, indicative=True, precision=precision)
    if wide.n > g.n:
        text += f" · {_ratio(wide.value)}{UNTRUSTED_BASE_MARK} over {wide.n}/{wide.of}"
    return text


def _entry_text(e: Entry, metric: str, device: str) -> tuple[str, str]:
    """(text, rich style) of one backend on one workload for `metric`."""
    if e.speedup is None:  # no ratio: the status says why (listed below the tables)
        return e.shown, STATUS_STYLE.get(e.status, "red") if e.status != "ok" else "yellow"
    if metric == "device_memory" and device != "cuda":
        return "—", "dim"
    if e.indicative:
        return _ratio(getattr(e, metric)) + UNTRUSTED_BASE_MARK, "yellow"
    return _ratio(getattr(e, metric)), ""


def _median(e: Entry) -> str:
    if e.median_ms is None:
        return "—"
    return ms(e.median_ms) + (DISTURBED_MARK if e.disturbed else "")


def _no_baseline(summary: SuiteSummary, precision: str, rows: list[Row]) -> str:
    """Where the baseline has no cell to compare with at a quantized precision (eager has
    no static int8), why, in one line instead of tables of "no baseline": each rung is
    compared with its own fp32 instead. "" where it has one."""
    b = summary.baseline
    if precision not in QUANTIZED or any(r.entries[b].speedup is not None for r in rows):
        return ""
    entries = [r.entries[b] for r in rows]
    why = Counter(
        f"{e.status} — {e.reason}" if e.reason and e.reason != e.status else e.status
        for e in entries
    )
    said = "; ".join(f"{n} {what}" for what, n in why.items())
    return (
        f"no table vs {b}: {b} gives no {precision} baseline on any model ({said}); "
        f"each backend is compared with its own fp32 below"
    )


def _slower_style(e: Entry, style: str) -> str:
    """A quantized rung slower than its fp32 reads red: a slowdown is never a plain number."""
    if e.counted and e.speedup is not None and e.speedup < 1:
        return "red"
    return style


def _explain(summary: SuiteSummary) -> list[str]:
    b = summary.baseline
    quantized = list(dict.fromkeys(p for m in summary.modes for p in summary.quantized(m)))
    return [
        f"speedup = {b} median / backend median (higher is faster); CPU memory = peak RSS "
        f"over the worker's baseline, backend / {b}; device memory = allocator peak, "
        f"backend / {b} (CUDA only, — on CPU); lower memory is leaner.",
        f"Geometric means over the workloads where both the backend and {b} are ok "
        "(every repetition) and verified; everything else is listed with its status.",
        *(
            [
                f"{UNTRUSTED_BASE_MARK} indicative: the backend or {b} is unstable (verified, "
                "timed on a quiet machine, but its median's CI is wider than the protocol "
                "asked, or its repetitions' medians disagree beyond it); the "
                f"{UNTRUSTED_BASE_MARK} mean takes these ratios in too."
            ]
            if summary.has_indicative
            else []
        ),
        *(
            [
                f"{' / '.join(quantized)} vs fp32 = a backend's fp32 median / its quantized "
                "median on the same workload (batch, sizes, threads): above 1× quantizing made "
                "that rung faster, below 1× slower. Geometric means over the models where both "
                "cells are ok and verified (a quantized one by its precision's acceptance "
                "rule); every other model is counted and named beside the mean."
            ]
            if quantized
            else []
        ),
    ]


# -- terminal -----------------------------------------------------------------------------


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
        no_baseline = _no_baseline(summary, precision, rows)
        if no_baseline:
            parts.append(Text(f"{heading}: {no_baseline}"))
            continue
        means = FitTable(title=Text(f"{heading}: geometric means vs {summary.baseline}"))
        means.add_column("backend", justify="left")
        for label in METRICS.values():
            means.add_column(Text(label), justify="right")
        for b in summary.backends:
            means.add_row(
                Text(b), *(Text(_mean(summary, mode, b, m, cuda, precision)) for m in METRICS)
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
                    cells.append(Text(_median(base), style="dim" if base.disturbed else ""))
                for b in summary.backends:
                    text, style = _entry_text(r.entries[b], metric, r.device)
                    cells.append(Text(text, style=style))
                table.add_row(*cells)
            parts.append(table)
        left_out = summary.not_counted(mode, precision)
        if left_out:
            parts.append(Text(f"Not in the {_means_name(summary, mode, precision)}:", style="bold"))
            for r, b, e in left_out:
                line = Text(f"  {r.label} · {b}: ")
                line.append(e.status, style=STATUS_STYLE.get(e.status, "red"))
                if e.reason and e.reason != e.status:
                    line.append(f" — {e.reason}", style="dim")
                parts.append(line)
    for mode in summary.modes:
        for precision in summary.quantized(mode):
            parts.extend(_versus_renderables(summary, mode, precision))
    for note in _explain(summary):
        parts.append(Text(note, style="dim"))
    return Group(*parts)


def _means_name(summary: SuiteSummary, mode: str, precision: str) -> str:
    """'inference means', 'inference int8 means' where precisions are several or not fp32."""
    name = MODE_NAMES.get(mode, mode)
    if _shows_precision(summary, precision):
        name += f" {precision}"
    return f"{name} means"


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
            text, style = _entry_text(e, "speedup", r.device)
            cells.append(Text(text, style=_slower_style(e, style)))
        table.add_row(*cells)
    parts: list = [table, Text(f"{precision} vs fp32, per backend:", style="bold")]
    for b in summary.backends:
        g = summary.versus_fp32(mode, precision, b)
        style = "red" if g.value is not None and g.value < 1 else ""
        parts.append(Text(f"  {versus_line(summary, mode, precision, b)}", style=style))
    return parts


# -- HTML ---------------------------------------------------------------------------------


def _first_upper(text: str) -> str:
    """'CPU memory' stays so, 'speedup' becomes 'Speedup' (str.capitalize lowers the rest)."""
    return text[:1].upper() + text[1:]


def _h(text: object) -> str:
    return html.escape(str(text), quote=True)


def _means_html(summary: SuiteSummary, mode: str, precision: str, cuda: bool) -> list[str]:
    """The group's geometric means vs the baseline: a row per backend, a column per metric."""
    out = ['<div class="scroll"><table>']
    out.append(f'<caption class="text">Geometric means vs {_h(summary.baseline)}</caption>')
    out.append(
        '<tr><th class="text">backend</th>'
        + "".join(f"<th>{_h(label)}</th>" for label in METRICS.values())
        + "</tr>"
    )
    for b in summary.backends:
        cells = "".join(
            f"<td>{_h(_mean(summary, mode, b, m, cuda, precision))}</td>" for m in METRICS
        )
        out.append(f'<tr><td class="text">{_h(b)}</td>{cells}</tr>')
    out.append("</table></div>")
    return out


def _metric_html(summary: SuiteSummary, rows: list[Row], metric: str) -> list[str]:
    """One metric per workload: a row per workload, a column per backend; the speedup
    table also shows the baseline's own median."""
    out = ['<div class="scroll"><table>']
    out.append(
        f'<caption class="text">{_h(_first_upper(METRICS[metric]))} vs '
        f"{_h(summary.baseline)}, per workload</caption>"
    )
    head = '<th class="text">workload</th><th class="text">domain</th>'
    if metric == "speedup":
        head += f"<th>{_h(summary.baseline)} median</th>"
    head += "".join(f"<th>{_h(b)}</th>" for b in summary.backends)
    out.append(f"<tr>{head}</tr>")
    for r in rows:
        base = r.entries[summary.baseline]
        tds = f'<td class="text">{_h(r.label)}</td><td class="text">{_h(r.domain)}</td>'
        if metric == "speedup":
            tds += f"<td>{_h(_median(base))}</td>"
        tds += "".join(_td(r.entries[b], metric, r.device) for b in summary.backends)
        out.append(f"<tr>{tds}</tr>")
    out.append("</table></div>")
    return out


def _group_html(summary: SuiteSummary, mode: str, precision: str) -> list[str]:
    """One (mode, precision)'s heading, means and per-workload tables, and what the means
    leave out; one line instead where the baseline has nothing to compare with."""
    rows = summary.rows_of(mode, precision)
    cuda = any(r.device == "cuda" for r in rows)
    name = MODE_NAMES.get(mode, mode)
    if _shows_precision(summary, precision):
        name += f" · {precision}"
    out = [f"<h3>{_h(_first_upper(name))}</h3>"]
    no_baseline = _no_baseline(summary, precision, rows)
    if no_baseline:
        out.append(f'<p class="note">{_h(_first_upper(no_baseline))}</p>')
        return out
    out += _means_html(summary, mode, precision, cuda)
    metrics = ["speedup", "cpu_memory"]
    if summary.has_device_memory:
        metrics.append("device_memory")
    for metric in metrics:
        out += _metric_html(summary, rows, metric)
    if not summary.has_device_memory:
        out.append(
            '<p class="note">No device memory: every cell ran on the CPU, so the device '
            "memory ratio is — throughout.</p>"
        )
    left_out = summary.not_counted(mode, precision)
    if left_out:
        out.append(f"<p>Not in the {_h(_means_name(summary, mode, precision))}:</p>")
        out.append('<ul class="notes">')
        for r, b, e in left_out:
            why = f" — {e.reason}" if e.reason and e.reason != e.status else ""
            out.append(f"<li>{_h(r.label)} · {_h(b)}: <b>{_h(e.status)}</b>{_h(why)}</li>")
        out.append("</ul>")
    return out


def suite_section(
    runs: Sequence[RunResult] | SuiteSummary,
    title: str = "",
    expected: Sequence[Expected | str] = (),
    section_id: str = "suite",
    baseline: str = BASELINE,
) -> str:
    """The summary as an HTML fragment (<section>, styled by the report's CSS): stored
    runs are summarized here (`expected` rows with no run are listed as missing), or a
    SuiteSummary is rendered as it is. `title` is the suite's name, when the runs are a
    named suite's."""
    summary = runs if isinstance(runs, SuiteSummary) else summarize(runs, title, expected, baseline)
    heading = f"Suite {summary.title}" if summary.title else "Suite summary"
    out = [f'<section id="{_h(section_id)}">', f"<h2>{_h(heading)}</h2>"]
    out += [f'<p class="muted">{_h(note)}</p>' for note in _explain(summary)]
    if not summary.rows:
        out.append('<p class="note">No stored runs to summarize.</p>')
    for mode, precision in summary.groups:
        out += _group_html(summary, mode, precision)
    for mode in summary.modes:
        for precision in summary.quantized(mode):
            out.extend(_versus_html(summary, mode, precision))
    out.append("</section>")
    return "\n".join(out)


def _td(e: Entry, metric: str, device: str, slower: bool = False) -> str:
    """One backend's cell: its ratio, or its status with the reason as the tooltip; with
    `slower`, a ratio below 1 says so in its tooltip."""
    text, _ = _entry_text(e, metric, device)
    if not e.counted:
        tip = _h(f"{e.status}: {e.reason}" if e.reason else e.status)
        return f'<td class="status-{_h(e.status)}" title="{tip}">{_h(text)}</td>'
    if slower and e.speedup is not None and e.speedup < 1:
        return f'<td title="slower than fp32"><b>{_h(text)}</b></td>'
    return f"<td>{_h(text)}</td>"


def _versus_html(summary: SuiteSummary, mode: str, precision: str) -> list[str]:
    """One quantized precision against fp32 on each rung: per workload, then per rung."""
    rows = summary.rows_of(mode, precision)
    name = f"{MODE_NAMES.get(mode, mode)} · {precision} vs fp32"
    out = [f"<h3>{_h(_first_upper(name))}</h3>", '<div class="scroll"><table>']
    out.append(
        f'<caption class="text">Speedup of {_h(precision)} over fp32 on the same backend, '
        "per workload</caption>"
    )
    head = '<th class="text">workload</th><th class="text">domain</th>'
    head += "".join(f"<th>{_h(b)}</th>" for b in summary.backends)
    out.append(f"<tr>{head}</tr>")
    for r in rows:
        tds = (
            f'<td class="text">{_h(r.workload or r.label)}</td><td class="text">{_h(r.domain)}</td>'
        )
        tds += "".join(
            _td(r.versus_fp32[b], "speedup", r.device, slower=True) for b in summary.backends
        )
        out.append(f"<tr>{tds}</tr>")
    out.append("</table></div>")
    out.append('<ul class="notes">')
    out += [f"<li>{_h(versus_line(summary, mode, precision, b))}</li>" for b in summary.backends]
    out.append("</ul>")
    return out
