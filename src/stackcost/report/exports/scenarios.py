"""LoadGen's scenario cells in the exports: their table in markdown, their results in JSON."""

from __future__ import annotations

from typing import Any

from stackcost.report.frames import scenarios
from stackcost.report.markdown import md_escape
from stackcost.store.runs import RunResult


def markdown(runs: list[RunResult]) -> str:
    """The scenario table as markdown ('' when the runs have no scenario cell)."""
    rows = scenarios.scenario_rows(runs)
    if not rows:
        return ""
    lines = [
        "## Deployment scenarios (MLPerf LoadGen)",
        "",
        "| " + " | ".join(scenarios.SCENARIO_HEADER) + " |",
        "|" + "---|" * len(scenarios.SCENARIO_HEADER),
        *("| " + " | ".join(md_escape(v) for v in row["cols"]) + " |" for row in rows),
        "",
        md_escape(scenarios.CAPTION),
    ]
    return "\n".join(lines) + "\n"


def records(runs: list[RunResult]) -> list[dict[str, Any]]:
    """Scenario cells for a JSON export: the cell, its status and each repetition's LoadGen
    result (verdict, headline, summary numbers)."""
    out = []
    for run in runs:
        for c in run.cells():
            if c.cell.scenario is None:
                continue
            out.append(
                {
                    "run_id": run.run_id,
                    "cell_key": c.cell.key(),
                    "cell": c.cell.model_dump(mode="json"),
                    "status": c.status,
                    "reason": c.reason,
                    "repetitions": [
                        r.scenario.model_dump(mode="json") if r.scenario else None
                        for r in c.repetitions
                    ],
                }
            )
    return out
