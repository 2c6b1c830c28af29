"""User code (model factories, custom backends) runs only in child processes: its exit,
print or crash is a cell's result, never the parent's end; a run that measured nothing
exits non-zero with one line saying why. (Unusable custom backends: tests/test_refusals.py.)"""

from __future__ import annotations

import sqlite3

import pytest
import torch

from stackcost.cli import main

QUICK = ["--min-time", "0.01", "--max-time", "0.2", "--threads", "1", "--quiet"]


def run_factory(capsys, tmp_path, factory: str, *extra: str):
    db = tmp_path / "s.db"
    argv = ["run", "--model", factory, "--input-shape", "4", "--backends", "eager"]
    code = main([*argv, *QUICK, "--db", str(db), *extra])
    out, err = capsys.readouterr()
    rows = sqlite3.connect(db).execute("SELECT status, reason FROM repetitions").fetchall()
    return code, out, err, rows


@pytest.mark.parametrize(
    "factory, status, needle",
    [
        ("tests.factories:exits", "failed", "sys.exit(0)"),
        ("builtins:exit", "failed", "sys.exit("),
        ("tests.factories:aborts", "crashed", "SIGABRT"),
        ("tests.factories:not_a_module", "failed", "not a torch.nn.Module"),
    ],
)
def test_a_factory_that_exits_crashes_or_lies_is_a_cells_result(
    capsys, tmp_path, factory, status, needle
):
    code, _, err, rows = run_factory(capsys, tmp_path, factory)
    assert code == 1  # measured nothing: a CI gate must not pass
    assert rows and rows[0][0] == status and needle in rows[0][1], rows
    lines = err.strip().splitlines()
    assert lines[-1].startswith("stackcost: nothing was measured cleanly"), err
    assert "Traceback" not in err


def test_a_chatty_factory_is_measured(capsys, tmp_path):
    code, out, _, rows = run_factory(capsys, tmp_path, "tests.factories:prints")
    assert rows[0][0] in ("ok", "unstable", "disturbed"), rows
    assert "hello from a chatty factory" not in out  # its print went to the worker's log
    assert code == 0 or rows[0][0] == "disturbed"


@pytest.mark.skipif(torch.cuda.is_available(), reason="here a CUDA cell can run")
def test_when_no_cell_can_run_it_is_one_line_and_nothing_is_stored(capsys, tmp_path):
    db = tmp_path / "s.db"
    code = main(["run", "mlp", "--backends", "eager", "--device", "cuda", *QUICK, "--db", str(db)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("stackcost: error: no cell can run here (1 cell): 1 unavailable"), err
    assert "pip install torch --index-url" in err  # unavailable carries the command that fixes it
    assert not db.exists()
