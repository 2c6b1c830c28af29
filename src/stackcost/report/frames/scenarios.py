"""Scenario cells (MLPerf LoadGen) as views show them: the headline over repetitions and
LoadGen's verdict, for the run's table, the HTML report and the exports
(exports/scenarios.py)."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from stackcost.result import MEASURED_STATUSES, ScenarioResult, headline
from stackcost.store.runs import CellResult, RunResult

TIMED_LOOP_LABEL = "timed loop"
CAPTION = (
    "scenario = MLPerf LoadGen's (timed loop: stackcost's own); LoadGen = its headline: "
    "single-stream p90 and multi-stream p99 query latency, server's highest QPS whose p99 "
    "stays under the bound (FindPeakPerformance), offline samples/s, where a LoadGen sample "
    "is one call on the cell's batch; verdict = LoadGen's VALID/INVALID (INVALID: unstable); "
    "vs eager on a scenario row compares the LoadGen headlines of the same scenario"
)


@dataclass(frozen=True)
class ScenarioView:
    label: str  # "server 50ms x2"
    metric: str  # "p90 latency"
    unit: str  # "ms"
    value: float | None  # median over measured repetitions
    verdict: str  # "VALID", "INVALID", "2/3 VALID", or "—" when LoadGen did not finish

    def shown(self) -> str:
        """'2.21 ms p90', '132 QPS at bound', '452 samples/s', or '—'."""
        if self.value is None:
            return "—"
        return ScenarioResult(
            scenario="", verdict="VALID", metric=self.metric, unit=self.unit, value=self.value
        ).shown()


def scenario_view(c: CellResult) -> ScenarioView | None:
    """The cell's LoadGen headline and verdict; None for a timed-loop cell."""
    scenario = c.cell.scenario
    if scenario is None:
        return None
    runs = [r.scenario for r in c.repetitions if r.scenario and r.status in MEASURED_STATUSES]
    runs = runs or [r.scenario for r in c.repetitions if r.scenario]
    values = [s.value for s in runs if s.value is not None]
    valid = sum(s.verdict == "VALID" for s in runs)
    if not runs:
        verdict = "—"
    elif valid in (0, len(runs)):
        verdict = runs[0].verdict if valid == 0 else "VALID"
    else:
        verdict = f"{valid}/{len(runs)} VALID"
    first = runs[0] if runs else None
    return ScenarioView(
        label=scenario.label(),
        metric=first.metric if first else "",
        unit=first.unit if first else "",
        value=float(statistics.median(values)) if values else None,
        verdict=verdict,
    )


SCENARIO_HEADER = [
    "model", "backend", "batch", "sizes", "precision", "threads", "device", "scenario",
    "status", "LoadGen", "verdict", "repetitions", "LoadGen's notes",
]  # fmt: skip


def scenario_rows(runs: list[RunResult]) -> list[dict[str, Any]]:
    """One row per scenario cell of `runs` (the HTML report's scenario table)."""
    rows = []
    for run in runs:
        for c in run.cells():
            view = scenario_view(c)
            if view is None:
                continue
            cell = c.cell
            notes = next((r.scenario.notes for r in c.repetitions if r.scenario), [])
            rows.append(
                {
                    "status": c.status,
                    "cols": [
                        cell.model.name,
                        cell.backend,
                        cell.batch_size,
                        cell.size_label(),
                        cell.precision,
                        cell.threads,
                        cell.device,
                        view.label,
                        c.status,
                        view.shown(),
                        view.verdict,
                        len(c.repetitions),
                        "; ".join(notes) or headline(c.reason),
                    ],  # fmt: skip
                }
            )
    return rows


def timed_loop_only(runs: list[RunResult]) -> list[RunResult]:
    """The runs without their scenario cells: the views built on the timed loop's medians
    (ratios, plots, the per-cell summary) must not take a LoadGen or generate cell as a
    baseline (a generate cell has a table and figures of its own: frames/generate.py)."""
    return [
        dataclasses.replace(
            r,
            records=[x for x in r.records if x[0].scenario is None and x[0].mode != "generate"],
        )
        for r in runs
    ]
