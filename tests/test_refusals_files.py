"""Bad files are refused: exit 2, one `stackcost: error:` line, no traceback, nothing written.

Specs (sweep), stores (run, report, compare, history), run-json files (compare) and
output paths (report -o/--figures, history -o/--figure, compare --markdown). Every
refusal leaves the files it was given byte-for-byte as they were, and creates nothing
beside them: no store, no -wal/-shm.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stackcost.cli import main
from stackcost.compare.diff import run_to_json
from stackcost.measure.stats import summarize
from stackcost.result import RepetitionResult
from stackcost.runspec.reader import MAX_SPEC_BYTES
from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from tests.conftest import tiny_cell

# A tiny, fast run: if the store were not refused first, it would still end quickly.
RUN = ["run", "mlp", "--backends", "eager", "--resolution", "8", "--threads", "1"]
RUN += ["--min-time", "0.01", "--max-time", "0.1", "--repeats", "1", "--quiet"]


def state(directory: Path) -> dict[str, str]:
    """Every file under `directory` with its sha256: what a refusal must leave as it was."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], directory: Path) -> str:
    """Run the CLI in-process; assert the refusal and that `directory` is unchanged."""
    before = state(directory)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("stackcost: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and len(err) <= 320, err
    assert state(directory) == before
    return err


def refused_in_subprocess(argv: list[str], directory: Path) -> str:
    """The real entry point: no traceback reaches stderr, whatever is raised inside."""
    before = state(directory)
    done = subprocess.run(
        [sys.executable, "-m", "stackcost.cli", *argv],
        capture_output=True,
        text=True,
        cwd=directory,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("stackcost: error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert state(directory) == before
    return done.stderr


# -- stores -------------------------------------------------------------------


def _result(samples: list[int]) -> RepetitionResult:
    return RepetitionResult(status="ok", stats=summarize(samples), samples_ns=samples)


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store (WAL mode) with one run of many pages, so damage lands inside it."""
    path = tmp_path_factory.mktemp("good") / "good.db"
    with Store(path) as store:
        run_id = store.create_run({}, {"machine": "test"})
        for batch in (1, 2, 4):
            cell_id = store.add_cell(run_id, tiny_cell(batch_size=batch))
            for _ in range(3):
                store.add_repetition(cell_id, _result(list(range(1_000_000, 1_004_000))))
        store.finish_run(run_id)
    return path


def _sqlite(path: Path, script: str) -> None:
    db = sqlite3.connect(path)
    db.executescript(script)
    db.commit()
    db.close()


def truncated(good: bytes, path: Path) -> None:
    path.write_bytes(good[: len(good) // 2])


def truncated_by_a_byte(good: bytes, path: Path) -> None:
    path.write_bytes(good[:-1])


def garbage_inside(good: bytes, path: Path) -> None:
    middle = len(good) // 2
    path.write_bytes(good[:middle] + b"\xde\xad\xbe\xef" * 1024 + good[middle + 4096 :])


def not_sqlite(good: bytes, path: Path) -> None:
    path.write_text("run_id,backend\n1,eager\n")


def foreign_sqlite(good: bytes, path: Path) -> None:
    _sqlite(path, "CREATE TABLE users (id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a');")


def foreign_meta_table(good: bytes, path: Path) -> None:
    _sqlite(path, "CREATE TABLE meta (k TEXT, v TEXT, w TEXT);")


def newer_schema(good: bytes, path: Path) -> None:
    path.write_bytes(good)
    _sqlite(path, "UPDATE meta SET value='99' WHERE key='schema_version';")
    for suffix in ("-wal", "-shm"):
        assert not path.with_name(path.name + suffix).exists()


def empty_file(good: bytes, path: Path) -> None:
    path.write_bytes(b"")


def sqlite_without_tables(good: bytes, path: Path) -> None:
    _sqlite(path, "PRAGMA user_version = 7;")


Damage = Callable[[bytes, Path], None]
# Refused by every command: writing to them, or reading them, would go wrong.
DAMAGED: dict[Damage, str] = {
    truncated: "damaged (truncated",
    truncated_by_a_byte: "damaged (truncated",
    garbage_inside: "damaged (",
    not_sqlite: "not a SQLite file",
    foreign_sqlite: "not a stackcost store (its tables: users)",
    foreign_meta_table: "not a stackcost store",
    newer_schema: "newer than this stackcost's",
}
# Refused by the readers only: a writer makes a new store of them (SQLite itself leaves a
# 0-byte file behind a connect), but they hold no runs to read.
EMPTY: dict[Damage, str] = {
    empty_file: "is empty (0 bytes)",
    sqlite_without_tables: "holds no stackcost store",
}


def make(tmp_path: Path, good_store: Path, damage: Damage) -> Path:
    path = tmp_path / "bad.db"
    damage(good_store.read_bytes(), path)
    return path


def readers(bad: Path, good: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", "--db", str(bad), "-o", str(bad.parent / "r.html")],
        "report-csv": ["report", "--db", str(bad), "--format", "csv"],
        "compare-base": ["compare", str(bad), str(good)],
        "compare-candidate": ["compare", str(good), str(bad)],
        "history": ["history", "--db", str(bad)],
    }


@pytest.mark.parametrize("command", ["report", "compare-base", "compare-candidate", "history"])
@pytest.mark.parametrize("damage", [*DAMAGED, *EMPTY], ids=lambda d: d.__name__)
def test_readers_refuse_a_bad_store(tmp_path, good_store, capsys, damage, command):
    bad = make(tmp_path, good_store, damage)
    err = refused(readers(bad, good_store)[command], capsys, tmp_path)
    assert {**DAMAGED, **EMPTY}[damage] in err and "bad.db" in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("damage", list(DAMAGED), ids=lambda d: d.__name__)
def test_run_refuses_a_bad_store_before_measuring(tmp_path, good_store, capsys, damage):
    bad = make(tmp_path, good_store, damage)
    started = time.monotonic()
    err = refused([*RUN, "--db", str(bad)], capsys, tmp_path)
    assert DAMAGED[damage] in err
    assert time.monotonic() - started < 5  # refused up front: no worker was started


def test_sweep_refuses_a_bad_store_before_measuring(tmp_path, good_store, capsys):
    bad = make(tmp_path, good_store, garbage_inside)
    spec = tmp_path / "spec.yaml"
    spec.write_text("models: [mlp]\nbackends: [eager]\nresolutions: [8]\nthreads: 1\n")
    assert "damaged" in refused(["sweep", str(spec), "--db", str(bad)], capsys, tmp_path)


def test_reading_a_good_store_leaves_it_as_it_was(tmp_path, good_store, capsys):
    """The readers open read-only: same bytes, no -wal/-shm, no schema written."""
    db = tmp_path / "s.db"
    db.write_bytes(good_store.read_bytes())
    before = state(tmp_path)
    for argv in readers(db, db).values():
        if argv[0] == "history" or "-o" in argv:
            continue  # history needs two runs; -o writes a file by design
        assert main(argv) in (0, 1), capsys.readouterr().err
    capsys.readouterr()
    assert state(tmp_path) == before


def test_a_damaged_store_is_refused_through_the_entry_point(tmp_path, good_store):
    bad = make(tmp_path, good_store, truncated)
    assert "damaged" in refused_in_subprocess(["report", "--db", str(bad)], tmp_path)
    assert "damaged" in refused_in_subprocess([*RUN, "--db", str(bad)], tmp_path)


# -- sweep specs --------------------------------------------------------------


def billion_laughs(key: str = "lol9") -> str:
    """Nine levels of nine aliases: 9^9 values from ten short lines."""
    lines = ["lol0: &lol0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        name = key if i == 9 else f"lol{i}"
        lines.append(f"{name}: &lol{i} [{', '.join([f'*lol{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


# What each message must hold is stackcost's own wording and the offending value, never a
# library's (PyYAML's, pydantic's): a library release must not break these tests.
SPECS: dict[str, tuple[str | bytes, str]] = {
    "billion-laughs": (billion_laughs(), "more than 100000 values once its aliases"),
    "billion-laughs-in-models": (billion_laughs("models"), "more than 100000 values"),
    "recursive-alias": ("models: &a [mlp, *a]\n", "recursive aliases are not allowed"),
    # Which refuses first, PyYAML's depth limit ("not valid YAML (...)") or stackcost's
    # ("nested more than 32 levels deep"), depends on the installed PyYAML: both name the
    # file and the line, and that (with the contract in `refused`) is what is asserted.
    "deep-nesting": ("models: " + "[" * 5000 + "]" * 5000 + "\n", "spec.yaml:1: "),
    "binary": (bytes(range(256)) * 4, "is not UTF-8 text (byte 0x80"),
    "latin-1": ("models: [café]\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9"),
    "too-large": (b"models: [" + b"mlp, " * (MAX_SPEC_BYTES // 5) + b"]\n", "larger than 1024 KiB"),
    "nul-byte": ("models: [mlp]\x00\n", "not valid YAML"),
    "huge-value": ("models: [mlp]\nrepeats: " + "x" * 200_000 + "\n", "repeats = 'xxx"),
    "huge-model-name": ("models: [" + "m" * 200_000 + "]\n", "unknown model 'mmm"),
    "huge-list-value": (
        "models: [mlp]\nrepeats: [" + ", ".join(["1"] * 20_000) + "]\n",
        "repeats = [1, 1",
    ),
    "python-tag": ("models: !!python/object/apply:os.system [ls]\n", "not valid YAML"),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_sweep_refuses_a_bad_spec_file(tmp_path, capsys, name):
    text, expected = SPECS[name]
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(text if isinstance(text, bytes) else text.encode())
    err = refused(["sweep", str(spec), "--db", str(tmp_path / "s.db")], capsys, tmp_path)
    assert expected in err
    assert not (tmp_path / "s.db").exists()


def test_billion_laughs_is_refused_in_under_a_second(tmp_path):
    from stackcost.errors import SpecError
    from stackcost.runspec.file import load_sweep

    spec = tmp_path / "laughs.yaml"
    spec.write_text(billion_laughs("models"))
    started = time.monotonic()
    with pytest.raises(SpecError, match="once its aliases are expanded"):
        load_sweep(spec)
    assert time.monotonic() - started < 1.0


def test_sweep_refuses_a_directory_as_spec(tmp_path, capsys):
    (tmp_path / "specs").mkdir()
    err = refused(
        ["sweep", str(tmp_path / "specs"), "--db", str(tmp_path / "s.db")], capsys, tmp_path
    )
    assert "is a directory" in err and "does not exist" not in err


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_sweep_refuses_an_endless_spec(tmp_path, capsys):
    err = refused(["sweep", "/dev/zero", "--db", str(tmp_path / "s.db")], capsys, tmp_path)
    assert "larger than" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_sweep_refuses_an_unreadable_spec(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("models: [mlp]\n")
    spec.chmod(0)
    err = refused(["sweep", str(spec), "--db", str(tmp_path / "s.db")], capsys, tmp_path)
    assert "cannot be read" in err


def test_billion_laughs_through_the_entry_point(tmp_path):
    (tmp_path / "spec.yaml").write_text(billion_laughs("models"))
    err = refused_in_subprocess(["sweep", "spec.yaml", "--db", "s.db"], tmp_path)
    assert "once its aliases are expanded" in err


# -- run-json -----------------------------------------------------------------


@pytest.fixture(scope="module")
def run_json(good_store: Path) -> str:
    with Store(good_store, read_only=True) as store:
        return run_to_json(RunResult.from_store(store, store.run_ids()[-1]))


def _edited(text: str, edit: Callable[[dict], object]) -> str:
    payload = json.loads(text)
    edit(payload)
    return json.dumps(payload)


RUN_JSONS: dict[str, tuple[Callable[[str], str | bytes], str]] = {
    "truncated": (lambda t: t[: len(t) // 2], "is not valid JSON (line 1, column"),
    "empty": (lambda t: "", "is not valid JSON"),
    "binary": (lambda t: bytes(range(256)), "is not UTF-8 text"),
    "a-list": (lambda t: "[1, 2]", "is not a run-json: the top level"),
    "summaries-only": (lambda t: '{"cells": [{"model": "mlp"}]}', "per-cell summaries only"),
    "no-records": (lambda t: '{"records": []}', "holds no repetitions"),
    "records-not-a-list": (lambda t: '{"records": 3}', "is not a run-json: records"),
    # The field is named as stackcost writes it (a dotted path); why it is wrong is pydantic's
    # wording ("Field required", "Input should be ..."), which is not asserted.
    "cell-missing": (
        lambda t: _edited(t, lambda p: p["records"][0].pop("cell")),
        "is not a run-json: records.0.cell: ",
    ),
    "bad-status": (
        lambda t: _edited(t, lambda p: p["records"][1]["result"].update(status="great")),
        "is not a run-json: records.1.result.status: ",
    ),
    "env-not-a-mapping": (
        lambda t: _edited(t, lambda p: p.update(env=[1])),
        "is not a run-json: env: ",
    ),
    "nested-too-deep": (lambda t: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
}


@pytest.mark.parametrize("name", list(RUN_JSONS))
def test_compare_refuses_a_bad_run_json(tmp_path, good_store, run_json, capsys, name):
    make_text, expected = RUN_JSONS[name]
    text = make_text(run_json)
    side = tmp_path / "side.json"
    side.write_bytes(text if isinstance(text, bytes) else text.encode())
    err = refused(["compare", str(good_store), str(side)], capsys, tmp_path)
    assert expected in err and "side.json" in err


def test_a_truncated_run_json_through_the_entry_point(tmp_path, run_json):
    (tmp_path / "side.json").write_text(run_json[:-10])
    assert "not valid JSON" in refused_in_subprocess(
        ["compare", "side.json", "side.json"], tmp_path
    )


# -- outputs ------------------------------------------------------------------


def _report(db: Path, *args: str) -> list[str]:
    return ["report", "--db", str(db), *args]


# name -> (argv from the test's directory and store, what the message says)
OUTPUTS: dict[str, tuple[Callable[[Path, Path], list[str]], str]] = {
    "report-o-directory": (lambda t, db: _report(db, "-o", str(t / "a-dir")), "is a directory"),
    "report-o-missing-dir": (
        lambda t, db: _report(db, "-o", str(t / "no" / "r.html")),
        "does not exist",
    ),
    "report-o-under-a-file": (
        lambda t, db: _report(db, "-o", str(t / "a-file" / "r.html")),
        "is not a directory",
    ),
    "report-o-the-store": (
        lambda t, db: _report(db, "--format", "csv", "-o", str(db)),
        "is an input of this command",
    ),
    "report-o-proc": (
        lambda t, db: _report(db, "-o", "/proc/stackcost-report.html"),
        "cannot be written",
    ),
    "report-figures-proc": (
        lambda t, db: _report(db, "-o", str(t / "r.html"), "--figures", "/proc/stackcost-figs"),
        "cannot be written",
    ),
    "report-figures-under-a-file": (
        lambda t, db: _report(db, "-o", str(t / "r.html"), "--figures", str(t / "a-file" / "f")),
        "is a file, not a directory",
    ),
    "history-o-directory": (
        lambda t, db: ["history", "--db", str(db), "-o", str(t / "a-dir")],
        "is a directory",
    ),
    "history-figure-format": (
        lambda t, db: ["history", "--db", str(db), "--figure", str(t / "plot.xyz")],
        "name an image format by its suffix",
    ),
    "compare-markdown-directory": (
        lambda t, db: ["compare", str(db), str(db), "--markdown", str(t / "a-dir")],
        "is a directory",
    ),
}


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_an_unwritable_output_is_refused_before_rendering(tmp_path, good_store, capsys, name):
    if "proc" in name and not Path("/proc").is_dir():
        pytest.skip("needs /proc")
    db = tmp_path / "s.db"
    db.write_bytes(good_store.read_bytes())
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "a-file").write_text("x")
    argv, expected = OUTPUTS[name]
    err = refused(argv(tmp_path, db), capsys, tmp_path)
    assert expected in err
    assert not (tmp_path / "r.html").exists()


def test_an_unwritable_output_through_the_entry_point(tmp_path, good_store):
    (tmp_path / "s.db").write_bytes(good_store.read_bytes())
    (tmp_path / "out").mkdir()
    err = refused_in_subprocess(["report", "--db", "s.db", "-o", "out"], tmp_path)
    assert "is a directory" in err
