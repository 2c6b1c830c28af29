"""User code (model factories, custom backends) runs only in child processes: its exit,
print or crash is a cell's result, never the parent's end; a run that measured nothing
exits non-zero with one line saying why. (Unusable custom backends: tests/test_refusals.py.)"""

from __future__ import annotations

import io
import os
import sqlite3
from contextlib import redirect_stderr, redirect_stdout

import pytest
import torch

from stackcost.cli import main
from tests.conftest import ROOT

QUICK = ["--min-time", "0.01", "--max-time", "0.2", "--threads", "1", "--quiet"]
# Factories that exit, crash or lie: (factory, its cell's status, a word of its reason).
BAD = [
    ("tests.factories:exits", "failed", "sys.exit(0)"),
    ("builtins:exit", "failed", "sys.exit("),
    ("tests.factories:aborts", "crashed", "SIGABRT"),
    ("tests.factories:not_a_module", "failed", "not a torch.nn.Module"),
]


def run_factory(capsys, tmp_path, factory: str, *extra: str):
    db = tmp_path / "s.db"
    argv = ["run", "--model", factory, "--input-shape", "4", "--backends", "eager"]
    code = main([*argv, *QUICK, "--db", str(db), *extra])
    out, err = capsys.readouterr()
    rows = sqlite3.connect(db).execute("SELECT status, reason FROM repetitions").fetchall()
    return code, out, err, rows


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    """One sweep of every bad factory, each its own cell and worker: (exit code, stderr,
    each factory's stored (status, reason) rows). Each case below reads its own cell; the
    exit code and the closing line are the run's, which measured nothing."""
    tmp = tmp_path_factory.mktemp("bad")
    spec, db = tmp / "sweep.yaml", tmp / "s.db"
    models = ", ".join(f"{{name: '{factory}', input_shape: [4]}}" for factory, _, _ in BAD)
    spec.write_text(f"models: [{models}]\nbackends: [eager]\n")
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(io.StringIO()), redirect_stderr(err):
        path = os.environ.get("PYTHONPATH")  # the workers import tests.factories
        mp.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{path}" if path else str(ROOT))
        code = main(["sweep", str(spec), *QUICK, "--db", str(db)])
    rows = sqlite3.connect(db).execute(
        "SELECT c.model, r.status, r.reason FROM repetitions r JOIN cells c ON c.id = r.cell_id"
        " ORDER BY r.id"
    )
    by_factory: dict[str, list[tuple[str, str]]] = {}
    for model, status, reason in rows:
        by_factory.setdefault(model, []).append((status, reason))
    return code, err.getvalue(), by_factory


@pytest.mark.parametrize("factory, status, needle", BAD)
def test_a_factory_that_exits_crashes_or_lies_is_a_cells_result(bad_run, factory, status, needle):
    code, err, by_factory = bad_run
    rows = by_factory.get(factory)
    assert code == 1  # measured nothing: a CI gate must not pass
    assert rows and rows[0][0] == status and needle in rows[0][1], by_factory
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
