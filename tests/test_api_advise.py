"""advise end to end on a tiny model: the phases, the stored answer, the budget, and a
search asked again that measures nothing twice."""

from __future__ import annotations

import sqlite3

import pytest

from stackcost.advise.constraints import Constraints
from stackcost.api.advise import advise, search_of
from stackcost.errors import SpecError
from stackcost.measure.protocol import Protocol

QUICK = Protocol(min_time_s=0.05, max_time_s=0.3, warmup_max_time_s=0.2, target_ci=0.2)


def tiny(**fields):
    fields = {
        "backends": ["onnxruntime"],
        "precisions": ["fp32"],
        "batch_sizes": [1, 2],
        "threads": [1],
        "sizes": {"resolution": [4]},
        "screen_protocol": QUICK,
        "final_protocol": QUICK,
        "final_repeats": 3,  # two processes are `unstable` at a 3% difference (t = 12.7)
        "budget_s": 600,
        **fields,
    }
    return search_of("mlp", **fields)


def count(db, table):
    return sqlite3.connect(db).execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_close_finalists_are_decided_side_by_side_and_asked_again_nothing_is_measured(tmp_path):
    db = tmp_path / "a.db"
    # A threshold of 50% makes the two finalists "too close": they go side by side.
    search = tiny(finalists=2, threshold=0.5, constraints=Constraints(latency_bound_ms=1000))
    lines: list[str] = []
    first = advise(search, db, on_phase=lines.append)
    assert first.recommended is not None and first.runner_up is not None
    assert first.comparison is not None and first.runs["pair"] == [first.comparison.pair_id]
    assert "side by side" in first.decided_by, first.decided_by
    assert first.reproduce.startswith("stackcost run mlp --backends onnxruntime --precision fp32")
    assert {e.label for e in first.entries} == {
        "onnxruntime fp32 b1 t1 resolution 4",
        "onnxruntime fp32 b2 t1 resolution 4",
    }
    assert any(line.startswith("feasibility: 2 of 2") for line in lines), lines
    measured = count(db, "repetitions")
    second = advise(search, db)
    assert count(db, "repetitions") == measured  # resumed: nothing measured twice
    assert count(db, "pairs") == 1  # the pair, as stored
    assert second.recommended.label == first.recommended.label
    assert count(db, "advice") == 2


def test_cells_no_rung_runs_are_out_before_anything_runs_and_the_budget_is_said(tmp_path):
    db = tmp_path / "b.db"
    # eager has no static int8: out at feasibility; a 1 s budget ends after the first group
    # (eager fp32, valid on every ISA), so the others are not tried whatever int8 does here.
    search = tiny(backends=["eager", "onnxruntime"], precisions=["fp32", "int8"], budget_s=1)
    answer = advise(search, db)
    feasibility = [e for e in answer.entries if e.phase == "feasibility"]
    assert feasibility and all(e.backend == "eager" for e in feasibility)
    assert answer.recommended is None
    assert answer.why_none.startswith("the budget ran out"), answer.why_none
    assert any("budget" in n for n in answer.not_tried), answer.not_tried


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"objective": "speed"}, "objective 'speed'"),
        ({"margin": 1.0}, "margin 1.0"),
        ({"finalists": 0}, "finalists 0"),
        ({"backends": []}, "no rung to search"),
        ({"batch_sizes": [0]}, "batch"),
    ],
)
def test_bad_searches_are_refused_before_anything_is_written(tmp_path, fields, needle):
    db = tmp_path / "c.db"
    with pytest.raises(SpecError, match=needle):
        advise(tiny(**fields), db)
    assert not db.exists()


def test_every_cell_is_screened_estimated_or_skipped_with_its_reason(tmp_path):
    # Three batches at two thread counts: the ends at two threads first, the middle batch
    # by its estimate, one thread only where the two-thread sibling was kept.
    search = tiny(batch_sizes=[1, 2, 4], threads=[1, 2], margin=0.0, finalists=1)
    lines: list[str] = []
    answer = advise(search, tmp_path / "c.db", on_phase=lines.append)
    assert len(answer.entries) == 6 and not answer.not_tried
    by_label = {e.label.split(" resolution")[0]: e for e in answer.entries}
    assert set(by_label) == {f"onnxruntime fp32 b{b} t{t}" for b in (1, 2, 4) for t in (1, 2)}
    middle = by_label["onnxruntime fp32 b2 t2"]
    if middle.status == "estimated":  # pruned on its estimate: no process of its own
        assert middle.repetitions == 0 and middle.decision.startswith("pruned on an estimate")
    else:  # its estimate was kept, so it was screened
        assert middle.repetitions >= 1, middle
    for label in ("onnxruntime fp32 b2 t1", "onnxruntime fp32 b4 t1"):
        e = by_label[label]
        assert e.status != "skipped" or e.decision.startswith("not screened: at t2"), e
    assert any(line.startswith("screening, middles: ") for line in lines), lines
    assert any(line.startswith("screening, fewer threads: ") for line in lines), lines
