"""`stackcost merge`: runs from several stores in one, each with its own environment; a
run present twice taken once; foreign, newer or repeated stores refused in one line."""

from __future__ import annotations

import sqlite3

import pytest

from stackcost.cli import main
from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from tests.conftest import tiny_cell
from tests.store.test_database import _result


def _store(path, machine: str, n_samples: int = 5) -> str:
    with Store(path) as store:
        run_id = store.create_run({"spec": machine}, {"hostname": machine}, "stackcost run mlp")
        cell_id = store.add_cell(run_id, tiny_cell())
        store.add_repetition(cell_id, _result([1_000 + i for i in range(n_samples)]))
        store.finish_run(run_id)
    return run_id


def _ids(path) -> list[str]:
    with sqlite3.connect(path) as db:
        return sorted(r[0] for r in db.execute("SELECT id FROM runs"))


def test_runs_of_two_machines_keep_their_environments_and_samples(tmp_path, capsys):
    a, b, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "all.db"
    run_a, run_b = _store(a, "box-a", 5), _store(b, "box-b", 7)
    assert main(["merge", str(a), str(b), "-o", str(out)]) == 0
    assert "2 runs merged" in capsys.readouterr().out
    with Store(out, read_only=True) as store:
        got = {r: RunResult.from_store(store, r) for r in (run_a, run_b)}
    assert got[run_a].env == {"hostname": "box-a"} and got[run_b].env == {"hostname": "box-b"}
    assert len(got[run_a].records[0][1].samples_ns) == 5
    assert len(got[run_b].records[0][1].samples_ns) == 7
    # The sources were only read.
    assert _ids(a) == [run_a] and _ids(b) == [run_b]
    # report --all takes every run of the merged store (the default is the latest alone).
    assert main(["report", "--db", str(out), "--all", "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert run_a in md and run_b in md


def test_a_run_in_two_stores_is_taken_once_and_a_differing_copy_is_named(tmp_path, capsys):
    a, b, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "all.db"
    run_a = _store(a, "box-a")
    assert main(["merge", str(a), "-o", str(b)]) == 0  # b now holds a's run too
    _store(b, "box-b")
    with Store(b) as store:  # and b's copy of it gains a repetition
        cell_id = store.add_cell(run_a, tiny_cell())
        store.add_repetition(cell_id, _result([9, 9, 9]))
    capsys.readouterr()
    assert main(["merge", str(a), str(b), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert len(_ids(out)) == 2
    assert "1 already there (taken once)" in text
    assert f"run {run_a}: kept the first copy (1 repetitions)" in text


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        ("foreign", "is a SQLite file but not a stackcost store"),
        ("newer", "has schema 99, newer than this stackcost's"),
        ("missing", "no database at"),
        ("twice", "a store is named twice"),
        ("into-itself", "is one of the stores being merged"),
    ],
)
def test_bad_stores_are_refused_in_one_line_and_nothing_is_written(
    tmp_path, capsys, make, expected
):
    good, bad, out = tmp_path / "good.db", tmp_path / "bad.db", tmp_path / "all.db"
    _store(good, "box")
    argv = ["merge", str(good), str(bad), "-o", str(out)]
    if make == "foreign":
        with sqlite3.connect(bad) as db:
            db.execute("CREATE TABLE photos (id INTEGER)")
    elif make == "newer":
        _store(bad, "future")
        with sqlite3.connect(bad) as db:
            db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    elif make == "twice":
        argv = ["merge", str(good), str(good), "-o", str(out)]
    elif make == "into-itself":
        argv = ["merge", str(good), "-o", str(good)]
    before = good.read_bytes()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("stackcost: error: ") and err.count("\n") == 1, err
    assert expected in err, err
    assert not out.exists() and good.read_bytes() == before
