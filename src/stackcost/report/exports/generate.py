"""A generate run's table (frames/generate.py) in markdown, its caption below."""

from __future__ import annotations

from stackcost.report.frames.generate import HEADER, caption, columns, generate_rows
from stackcost.report.markdown import md_escape
from stackcost.store.runs import RunResult


def table(result: RunResult) -> str:
    """One run's generate cells as a markdown table, its caption below ('' without any)."""
    rows = generate_rows(result)
    if not rows:
        return ""
    lines = ["| " + " | ".join(HEADER) + " |", "|---|---:|---:|---:|---|---|---|" + "---:|" * 10]
    lines += ["| " + " | ".join(md_escape(v) for v in columns(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n\n" + caption([r["cell"].cell.model for r in rows]) + "\n"


def markdown(runs: list[RunResult]) -> str:
    """The generate cells' tables of every run; '' without any."""
    return "\n\n".join(t for r in runs if (t := table(r)))
