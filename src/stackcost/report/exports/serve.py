"""A serve run's rate sweeps (frames/serve.py) in markdown, the SLO line under each."""

from __future__ import annotations

from stackcost.report.frames.serve import HEADER, few_note, serve_cells, serve_rows, slo_line
from stackcost.store.runs import RunResult


def table(result: RunResult) -> str:
    """One run's sweeps as a markdown table, and the SLO line under it."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    rows = serve_rows(result)
    for row in rows:
        lines.append("| " + " | ".join(v.replace("|", "/") for v in row["cols"]) + " |")
    return "\n".join([*lines, "", *(f"{n}\n" for n in few_note(rows)), slo_line(result)])


def markdown(runs: list[RunResult]) -> str:
    """The serve cells' rate sweeps of every run; '' without any."""
    return "\n\n".join(table(r) for r in runs if serve_cells(r))
