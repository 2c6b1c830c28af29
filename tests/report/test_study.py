"""The inference-framework study's tables: per batch size, frameworks × machines, the
best of a column in bold, * where a machine beat the reference, status where no number."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from stackcost.cell import Cell
from stackcost.measure.stats import summarize
from stackcost.report.exports.formats import export
from stackcost.report.frames import study
from stackcost.report.html.page import render_html
from stackcost.report.html.study import ratio_figure
from stackcost.result import RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.store.runs import RunResult
from stackcost.verify import Verification


def _rep(median_ms: float, batch: int, status: str = "ok") -> RepetitionResult:
    samples = [int(median_ms * 1e6)] * 9
    measured = status in ("ok", "wrong")
    return RepetitionResult(
        status=status,
        reason="outputs differ" if status == "wrong" else "",
        stats=summarize(samples) if measured else None,
        samples_ns=samples if measured else [],
        throughput=batch * 1000.0 / median_ms if measured else None,
        verification=Verification(
            max_abs_err=0,
            max_rel_err=0 if status == "ok" else 1.0,
            tolerance=1e-4,
            ok=status == "ok",
        )  # fmt: skip
        if measured
        else None,
    )


def _run(run_id: str, host: str, times: dict[tuple[str, int], float | str]) -> RunResult:
    records = []
    for (backend, batch), t in times.items():
        cell = Cell(model=model_ref("resnet18"), backend=backend, batch_size=batch, resolution=32)
        rep = _rep(10.0, batch, t) if isinstance(t, str) else _rep(t, batch)
        records.append((cell, rep))
    env = {"hostname": host, "cpu": {"model": "Some CPU"}}
    return RunResult(run_id, Path("x.db"), env, {"backends": ["eager", "tf"]}, records)


def _runs() -> list[RunResult]:
    return [
        _run("a", "box-a", {("eager", 8): 100.0, ("tf", 8): 50.0, ("eager", 16): 200.0}),
        _run(
            "b",
            "box-b",
            {("eager", 8): 80.0, ("tf", 8): 60.0, ("eager", 16): 150.0, ("tf", 16): "wrong"},
        ),
    ]


def test_one_table_per_batch_with_machines_as_columns():
    tables = study.study_tables(_runs())
    assert [t.title for t in tables] == [
        "resnet18 · res 32 px · fp32 · batch 8: throughput (samples/s)",
        "resnet18 · res 32 px · fp32 · batch 16: throughput (samples/s)",
    ]
    b8 = tables[0]
    assert b8.column_axis == "machine"
    assert list(b8.table.columns) == ["box-a · Some CPU", "box-b · Some CPU"]
    assert list(b8.table.index) == ["eager", "tf"]
    # throughput = batch / median: eager 80 vs 100 samples/s, tf 160 vs 133
    assert b8.table.at["eager", "box-b · Some CPU"] == 100.0
    assert b8.best("box-a · Some CPU") == "tf"
    # box-b beat the reference (box-a, the first) on eager, not on tf
    assert b8.beats == {("eager", "box-b · Some CPU")}


def test_the_reference_is_chosen_and_a_wrong_cell_shows_its_status():
    tables = study.study_tables(_runs(), reference="box-b")
    b8, b16 = tables
    assert b8.reference == "box-b · Some CPU"
    assert b8.beats == {("tf", "box-a · Some CPU")}
    assert study.cell_text(b16, "tf", "box-b · Some CPU") == "wrong"  # not a number
    assert pd.isna(b16.table.at["tf", "box-a · Some CPU"])
    assert study.cell_text(b16, "tf", "box-a · Some CPU") == "—"  # never ran there


def test_one_machine_one_configuration_draws_no_study_table():
    assert study.study_tables(_runs()[:1]) == []


def test_markdown_and_html_show_the_tables():
    md = export(_runs(), "md")
    assert "#### resnet18" in md and "| framework | box-a · Some CPU | box-b · Some CPU |" in md
    assert "**160**" in md  # tf on box-a, best of its column, in bold
    assert "100*" in md  # eager on box-b beat box-a
    page = render_html(_runs(), reference="box-a")
    assert 'id="study"' in page and "Frameworks across machines" in page
    assert "* = higher than box-a · Some CPU on that row" in page


def test_time_ratios_between_machines_are_torchbenchs_t_a_over_t_b():
    ratios = study.time_ratios(study.study_tables(_runs()))
    b8 = ratios[ratios["workload"].str.endswith("batch 8")].set_index("framework")
    # box-b over box-a (the reference): eager 100 vs 80 samples/s -> 0.8 of the time
    assert b8.at["eager", "ratio"] == 0.8
    assert round(b8.at["tf", "ratio"], 3) == round(160 / (8000 / 60), 3)
    fig = ratio_figure(study.study_tables(_runs()))
    assert fig is not None and [t.name for t in fig.data] == ["box-b · Some CPU / box-a · Some CPU"]
    assert ratio_figure([]) is None
    assert "time per sample vs the reference machine" in render_html(_runs())
