"""Scenario cells (MLPerf LoadGen) in the run's table and its CSV: rows in the order the
scenarios were given, and LoadGen's headline as columns of its own."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd
from rich.console import Console

from stackcost.report.exports.formats import export
from stackcost.report.frames import tidy
from stackcost.report.terminal.run import results_table
from stackcost.result import RepetitionResult, ScenarioResult
from stackcost.scenarios.settings import LoadGenSettings
from stackcost.store.runs import RunResult
from tests.report.marks_fixtures import cell, rep

SETTINGS = LoadGenSettings(latency_bound_ms=50)
HEADLINES = {  # scenario: (metric, unit, value)
    "server": ("QPS at bound", "QPS", 120.0),
    "single-stream": ("p90 latency", "ms", 4.5),
    "offline": ("throughput", "samples/s", 300.0),
}
GIVEN = ["server", "timed-loop", "single-stream", "offline"]  # not alphabetical


def scenario_rep(name: str) -> RepetitionResult:
    metric, unit, value = HEADLINES[name]
    r = rep(4.0)
    r.scenario = ScenarioResult(
        scenario=name, verdict="VALID", metric=metric, unit=unit, value=value
    )
    return r


def mixed_run() -> RunResult:
    """Two backends, each under the scenarios of GIVEN, recorded in plan order."""
    records = []
    for backend in ("eager", "onnxruntime"):
        for name in GIVEN:
            scenario = None if name == "timed-loop" else SETTINGS.config(name)
            c = cell(backend, 1).model_copy(update={"scenario": scenario})
            records.append((c, rep(4.0) if scenario is None else scenario_rep(name)))
    return RunResult(run_id="scen", db_path=Path("scen.db"), env={}, spec={}, records=records)


def test_the_table_keeps_the_given_scenario_order() -> None:
    console = Console(record=True, width=300)
    console.print(results_table(mixed_run()))
    text = console.export_text()
    rows = re.findall(r"│\s*(server 50ms|timed loop|single-stream|offline)\s*│", text)
    shown = ["server 50ms", "timed loop", "single-stream", "offline"]
    assert rows[:8] == [s for s in shown for _ in ("eager", "onnxruntime")]


def test_csv_carries_loadgen_headlines_on_scenario_rows_only() -> None:
    frame = pd.read_csv(io.StringIO(export([mixed_run()], "csv")))
    assert {"loadgen_metric", "loadgen_value", "loadgen_unit", "loadgen_verdict"} <= set(frame)
    timed = frame[frame["scenario"].isna()]
    assert timed["loadgen_value"].isna().all()
    server = frame[frame["scenario"] == "server 50ms"].iloc[0]
    assert (server["loadgen_metric"], server["loadgen_value"]) == ("QPS at bound", 120.0)
    assert (server["loadgen_unit"], server["loadgen_verdict"]) == ("QPS", "VALID")


def test_a_timed_loop_run_has_no_loadgen_columns() -> None:
    run = RunResult(
        run_id="plain",
        db_path=Path("scen.db"),
        env={},
        spec={},
        records=[(cell("eager", 1), rep(4.0))],
    )
    assert not [c for c in tidy.frame([run]) if c.startswith("loadgen_")]
