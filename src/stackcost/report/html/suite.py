"""The suite summary (frames/suite.py) as an HTML fragment of the report page: what the
terminal's tables say (terminal/suite.py), every string from the store escaped."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stackcost.backends import BASELINE
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
    summarize,
    versus_line,
)
from stackcost.runspec.suite import Expected

if TYPE_CHECKING:
    from stackcost.store.runs import RunResult


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
            f"<td>{_h(mean_text(summary, mode, b, m, cuda, precision))}</td>" for m in METRICS
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
            tds += f"<td>{_h(median_text(base))}</td>"
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
    if shows_precision(summary, precision):
        name += f" · {precision}"
    out = [f"<h3>{_h(_first_upper(name))}</h3>"]
    no_baseline = no_baseline_note(summary, precision, rows)
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
        out.append(f"<p>Not in the {_h(means_name(summary, mode, precision))}:</p>")
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
    out += [f'<p class="muted">{_h(note)}</p>' for note in explain(summary)]
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
    text, _ = entry_text(e, metric, device)
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
