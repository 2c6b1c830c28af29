"""Held-out rows: stored under a run of their own, left out of the measured runs, carried
by a merge, and found by a timing cell of the same network, rung and precision."""

from __future__ import annotations

import sqlite3

from stackcost.cli import main
from stackcost.store.database import HELDOUT_KIND, Store
from stackcost.store.heldout import identity
from stackcost.store.runs import RunResult
from tests.conftest import tiny_cell
from tests.store.test_database import _result


def _row(precision: str, value: float) -> dict:
    return {"backend": "eager", "precision": precision, "status": "ok", "reason": "",
            "ppl_increase_pct": value}  # fmt: skip


def _timing_and_heldout(path) -> str:
    """A timing run of eager w8; held-out evaluations of its network (twice: the later row
    counts) and of one with another class count."""
    cell = tiny_cell(precision="w8")
    other = cell.model.model_copy(update={"num_classes": cell.model.num_classes + 1})
    with Store(path) as store:
        timed = store.create_run({"spec": 1}, {})
        store.add_repetition(store.add_cell(timed, cell), _result([5, 6, 7]))
        for model, value in ((cell.model, 9.0), (cell.model, 2.5), (other, 50.0)):
            run = store.create_run({"kind": HELDOUT_KIND}, {})
            row = _row("w8", value)
            store.add_heldout(run, "mlp", identity(model), "ppl_increase_pct", value, row)
    return timed


def test_a_timing_cell_finds_the_latest_row_of_its_own_network(tmp_path):
    path = tmp_path / "s.db"
    timed = _timing_and_heldout(path)
    with Store(path, read_only=True) as store:
        assert store.run_ids() == [timed]  # held-out runs are not measured runs
        run = RunResult.from_store(store, timed)
    found = run.heldout_of(tiny_cell(precision="w8"))
    assert found is not None and found.value == 2.5 and found.metric == "ppl_increase_pct"
    assert run.heldout_of(tiny_cell(precision="w4")) is None
    assert run.heldout_of(tiny_cell("onnxruntime", precision="w8")) is None
    # Another architecture of the same name is another network: its row is not taken.
    twenty = tiny_cell(precision="w8")
    twenty = twenty.model_copy(
        update={"model": twenty.model.model_copy(update={"num_classes": 20})}
    )
    assert run.heldout_of(twenty) is None


def test_a_merge_carries_held_out_runs_once(tmp_path):
    a, out = tmp_path / "a.db", tmp_path / "out.db"
    _timing_and_heldout(a)
    assert main(["merge", str(a), "-o", str(out)]) == 0
    assert main(["merge", str(a), "-o", str(out)]) == 0  # again: every run a duplicate
    db = sqlite3.connect(out)
    assert db.execute("SELECT COUNT(*) FROM heldout").fetchone()[0] == 3
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 4


def test_a_store_of_held_out_rows_alone_says_so(tmp_path, capsys):
    path = tmp_path / "h.db"
    with Store(path) as store:
        run = store.create_run({"kind": HELDOUT_KIND}, {})
        store.add_heldout(run, "mlp", {}, "ppl_increase_pct", 1.0, _row("w8", 1.0))
    assert main(["report", "--db", str(path), "--format", "md"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "only held-out rows" in err, err
