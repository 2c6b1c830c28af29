"""A cell the time cap left unstable: the run table says what to change under it."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from stackcost.measure.protocol import Protocol
from stackcost.measure.stats import summarize
from stackcost.report.terminal.run import TIME_CAP_NOTE, results_table
from stackcost.result import RepetitionResult
from stackcost.store.runs import RunResult
from tests.conftest import tiny_cell


def _text(status: str, reason: str) -> str:
    samples = [1_000_000 + 1000 * (k % 7) for k in range(50)]
    rep = RepetitionResult(
        status=status, reason=reason, stats=summarize(samples), samples_ns=samples
    )
    run = RunResult(
        run_id="r", db_path=Path("unused.db"), env={},
        spec={"repeats": 1, "protocol": Protocol().model_dump()},
        records=[(tiny_cell(), rep)],
    )  # fmt: skip
    console = Console(width=400, record=True)
    console.print(results_table(run))
    return " ".join(console.export_text().split())


def test_the_time_cap_note_appears_only_under_a_capped_cell():
    capped = _text("unstable", "stopped by time cap after 16 iterations; CI of median +/-9.0%")
    assert " ".join(TIME_CAP_NOTE.split()) in capped
    assert "--max-time" not in _text("ok", "")
    assert "--max-time" not in _text("unstable", "warmup did not settle in 10 s")
