"""A store written by main before the spec/store/scenario restructuring (f73be3d) still opens,
reports and compares byte for byte as it did then.

fixtures/main-f73be3d.db holds a timed-loop run of the tiny mlp (eager and ONNX Runtime, two
repetitions, twice), a LoadGen run (single-stream and offline) and a training run; the
golden files beside it are what that main printed (fixtures/golden.sh made them), plus the
columns added since, each on purpose: the spreads within and between processes (issue 62:
the csv's window_spread, the cells' spread_within and spread_between, the markdown's spread
in/between)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stackcost.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "golden"
FIRST, SECOND = "20261125-86c13d1a", "20261125-3b11a152"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    shutil.copy(FIXTURES / "main-f73be3d.db", path)
    return path


@pytest.mark.parametrize(
    ("golden", "argv"),
    [
        ("all.md", ["--all", "--format", "md"]),
        ("all.csv", ["--all", "--format", "csv"]),
        ("all.json", ["--all", "--format", "json"]),
        ("run.json", [FIRST, "--format", "run-json"]),
    ],
)
def test_report_of_an_old_store_is_unchanged(db, capsys, golden, argv):
    assert main(["report", "--db", str(db), *argv]) == 0
    assert capsys.readouterr().out == (GOLDEN / golden).read_text()


def test_compare_of_an_old_store_is_unchanged(db, tmp_path, capsys):
    out = tmp_path / "compare.md"
    main(["compare", "--db", str(db), FIRST, SECOND, "--markdown", str(out)])
    capsys.readouterr()
    assert out.read_text() == (GOLDEN / "compare.md").read_text()
