"""The suite summary (stackcost.suite.SuiteSummary) as rich tables and as an HTML fragment.

Both say the same things: per backend, the geometric mean of the speedup over eager and of
the memory ratios, each with the number of workloads it is taken over; per workload, each
backend's ratio or, where it has none, its status; and the list of every (workload,
backend) left out of the means with its reason. Text from the store (model names,
reasons) is never markup: rich Text in the terminal, escaped in HTML.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

from stackcost.backends import BASELINE
from stackcost.report.marks import DISTURBED_MARK, STATUS_STYLE, UNTRUSTED_BASE_MARK
from stackcost.report.suite_data import Entry, SuiteSummary, summarize
from stackcost.report.units import ms

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


def _mean(summary: SuiteSummary, mode: str, backend: str, metric: str, cuda: bool) -> str:
    """'1.42× over 2/6', '— over 0/6' when no workload counts, then, where unstable
    cells add to it, the indicative mean: '1.42× over 2/6 · 1.30×? over 6/6'; '—' for
    device memory where nothing ran on a GPU."""
    if metric == "device_memory" and not cuda:
        return "—"
    g = summary.geomean(mode, backend, metric)
    text = f"{_ratio(g.value)} over {g.n}/{g.of}"
    wide = summary.geomean(mode, backend, metric, indicative=True)
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


def _explain(summary: SuiteSummary) -> list[str]:
    b = summary.baseline
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
    ]


# -- terminal -----------------------------------------------------------------------------


def summary_renderables(summary: SuiteSummary) -> Group:
    """Every mode's tables and the list of what the means leave out, for console.print."""
    parts: list = []
    for mode in summary.modes:
        rows = summary.rows_of(mode)
        cuda = any(r.device == "cuda" for r in rows)
        where = sorted({r.device for r in rows if r.device})
        heading = f"suite {summary.title} · " if summary.title else "suite · "
        heading += MODE_NAMES.get(mode, mode)
        if where:
            heading += f" · {', '.join(where)}"
        means = Table(title=Text(f"{heading}: geometric means vs {summary.baseline}"))
        means.add_column("backend", justify="left")
        for label in METRICS.values():
            means.add_column(Text(label), justify="right")
        for b in summary.backends:
            means.add_row(Text(b), *(Text(_mean(summary, mode, b, m, cuda)) for m in METRICS))
        parts.append(means)
        metrics = ["speedup", "cpu_memory"]
        if summary.has_device_memory:
            metrics.append("device_memory")
        for metric in metrics:
            table = Table(title=Text(f"{heading}: {METRICS[metric]} vs {summary.baseline}"))
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
        left_out = summary.not_counted(mode)
        if left_out:
            parts.append(Text(f"Not in the {MODE_NAMES.get(mode, mode)} means:", style="bold"))
            for r, b, e in left_out:
                line = Text(f"  {r.label} · {b}: ")
                line.append(e.status, style=STATUS_STYLE.get(e.status, "red"))
                if e.reason and e.reason != e.status:
                    line.append(f" — {e.reason}", style="dim")
                parts.append(line)
    for note in _explain(summary):
        parts.append(Text(note, style="dim"))
    return Group(*parts)


# -- HTML ---------------------------------------------------------------------------------


def _first_upper(text: str) -> str:
    """'CPU memory' stays so, 'speedup' becomes 'Speedup' (str.capitalize lowers the rest)."""
    return text[:1].upper() + text[1:]


def _h(text: object) -> str:
    return html.escape(str(text), quote=True)


def suite_section(
    runs: Sequence[RunResult] | SuiteSummary,
    title: str = "",
    expected: Sequence[str] = (),
    section_id: str = "suite",
    baseline: str = BASELINE,
) -> str:
    """The summary as an HTML fragment (<section>, styled by the report's CSS): stored
    runs are summarized here (`expected` workload labels with no run are listed as
    missing), or a SuiteSummary is rendered as it is. `title` is the suite's name, when
    the runs are a named suite's."""
    summary = runs if isinstance(runs, SuiteSummary) else summarize(runs, title, expected, baseline)
    heading = f"Suite {summary.title}" if summary.title else "Suite summary"
    out = [f'<section id="{_h(section_id)}">', f"<h2>{_h(heading)}</h2>"]
    out += [f'<p class="muted">{_h(note)}</p>' for note in _explain(summary)]
    if not summary.rows:
        out.append('<p class="note">No stored runs to summarize.</p>')
    for mode in summary.modes:
        rows = summary.rows_of(mode)
        cuda = any(r.device == "cuda" for r in rows)
        name = MODE_NAMES.get(mode, mode)
        out.append(f"<h3>{_h(name.capitalize())}</h3>")
        out.append('<div class="scroll"><table>')
        out.append(f'<caption class="text">Geometric means vs {_h(summary.baseline)}</caption>')
        out.append(
            '<tr><th class="text">backend</th>'
            + "".join(f"<th>{_h(label)}</th>" for label in METRICS.values())
            + "</tr>"
        )
        for b in summary.backends:
            cells = "".join(f"<td>{_h(_mean(summary, mode, b, m, cuda))}</td>" for m in METRICS)
            out.append(f'<tr><td class="text">{_h(b)}</td>{cells}</tr>')
        out.append("</table></div>")
        metrics = ["speedup", "cpu_memory"]
        if summary.has_device_memory:
            metrics.append("device_memory")
        for metric in metrics:
            out.append('<div class="scroll"><table>')
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
                for b in summary.backends:
                    e = r.entries[b]
                    text, _ = _entry_text(e, metric, r.device)
                    if not e.counted:
                        tip = _h(f"{e.status}: {e.reason}" if e.reason else e.status)
                        tds += f'<td class="status-{_h(e.status)}" title="{tip}">{_h(text)}</td>'
                    else:
                        tds += f"<td>{_h(text)}</td>"
                out.append(f"<tr>{tds}</tr>")
            out.append("</table></div>")
        if not summary.has_device_memory:
            out.append(
                '<p class="note">No device memory: every cell ran on the CPU, so the device '
                "memory ratio is — throughout.</p>"
            )
        left_out = summary.not_counted(mode)
        if left_out:
            out.append(f"<p>Not in the {_h(name)} means:</p>")
            out.append('<ul class="notes">')
            for r, b, e in left_out:
                why = f" — {e.reason}" if e.reason and e.reason != e.status else ""
                out.append(f"<li>{_h(r.label)} · {_h(b)}: <b>{_h(e.status)}</b>{_h(why)}</li>")
            out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)
