"""Merging stores from several machines into one, so one report compares them.

Every run keeps its own row, environment included (the machine it ran on is in its
env_json), its cells, repetitions, samples and epochs; only the row ids of cells and
repetitions are renumbered, since each store counts its own. A run id present twice is
the same run (ids are a date and a random suffix): it is taken once, from the first store
that holds it, and a later copy that holds a different number of repetitions is named
in the outcome rather than silently dropped.

Each source is checked first (damaged, foreign, or of a schema newer than this stackcost:
refused in one line, nothing written). An older schema is migrated in a temporary copy,
so a source file is never written.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stackcost.clip import shown
from stackcost.errors import SpecError
from stackcost.store.check import connect_read_only, store_problem
from stackcost.store.database import SCHEMA_VERSION, Store, check_writable

# Child tables of a run, in the order their keys depend on each other.
CHILDREN = ("cells", "repetitions", "samples", "epochs")


@dataclass
class Merged:
    """What a merge did: runs added per source, runs already there, differing copies."""

    added: dict[str, list[str]] = field(default_factory=dict)  # source -> run ids
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # source -> run ids
    differing: list[str] = field(default_factory=list)  # one line per differing copy

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.added.values())


def check_sources(sources: Sequence[Path], output: Path) -> None:
    """Every problem with the inputs, before anything is written: SpecError, one line."""
    if len(sources) < 1:
        raise SpecError("give at least one store to merge (stackcost merge A.db B.db -o all.db)")
    resolved = [s.resolve() for s in sources]
    if len(set(resolved)) != len(resolved):
        raise SpecError("a store is named twice: give each once")
    if output.resolve() in resolved:
        raise SpecError(f"-o {shown(str(output))} is one of the stores being merged")
    for source in sources:
        problem = store_problem(source, writing=False, newest=SCHEMA_VERSION)
        if problem:
            raise SpecError(problem)
    problem = check_writable(output)
    if problem:
        raise SpecError(problem)


def merge(sources: Sequence[Path], output: Path) -> Merged:
    """Add every run of `sources` to the store `output` (created if need be)."""
    check_sources(sources, output)
    merged = Merged()
    with Store(output) as out, tempfile.TemporaryDirectory(prefix="stackcost-merge-") as tmp:
        # A copy, migrated to this schema by opening it: the source is only read.
        for i, source in enumerate(sources):
            copy = Path(tmp) / f"{i}.db"
            _copy(source, copy)
            with Store(copy):
                pass
            _merge_one(out.db, copy, str(source), merged)
    return merged


def _copy(source: Path, copy: Path) -> None:
    """A consistent copy of `source`, WAL contents included (SQLite's backup API)."""
    db, _ = connect_read_only(source)
    try:
        target = sqlite3.connect(copy)
        with target:
            db.backup(target)
        target.close()
    finally:
        db.close()


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def _merge_one(out: sqlite3.Connection, copy: Path, name: str, merged: Merged) -> None:
    src = sqlite3.connect(copy)
    src.row_factory = sqlite3.Row
    try:
        known = {r[0] for r in out.execute("SELECT id FROM runs")}
        added, dupes = merged.added.setdefault(name, []), merged.duplicates.setdefault(name, [])
        run_columns = _columns(src, "runs")
        for run in src.execute("SELECT * FROM runs ORDER BY started_at, id").fetchall():
            run_id = run["id"]
            if run_id in known:
                dupes.append(run_id)
                theirs, ours = _repetition_count(src, run_id), _repetition_count(out, run_id)
                if theirs != ours:
                    merged.differing.append(
                        f"run {run_id}: kept the first copy ({ours} repetitions); "
                        f"{name} has {theirs}"
                    )
                continue
            with out:
                _insert(out, "runs", run_columns, [run[c] for c in run_columns])
                _copy_run(src, out, run_id)
            added.append(run_id)
            known.add(run_id)
    finally:
        src.close()


def _repetition_count(db: sqlite3.Connection, run_id: str) -> int:
    (n,) = db.execute(
        "SELECT COUNT(*) FROM repetitions r JOIN cells c ON c.id = r.cell_id WHERE c.run_id = ?",
        (run_id,),
    ).fetchone()
    return int(n)


def _insert(db: sqlite3.Connection, table: str, columns: list[str], values: list) -> int:
    marks = ", ".join("?" for _ in columns)
    cursor = db.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", values)
    return int(cursor.lastrowid or 0)


def _copy_run(src: sqlite3.Connection, out: sqlite3.Connection, run_id: str) -> None:
    """A run's cells, repetitions, samples and epochs, with new row ids."""
    cell_cols = [c for c in _columns(src, "cells") if c != "id"]
    rep_cols = [c for c in _columns(src, "repetitions") if c != "id"]
    sample_cols = _columns(src, "samples")
    epoch_cols = _columns(src, "epochs")
    for cell in src.execute("SELECT * FROM cells WHERE run_id = ?", (run_id,)).fetchall():
        cell_id = _insert(out, "cells", cell_cols, [cell[c] for c in cell_cols])
        reps = src.execute("SELECT * FROM repetitions WHERE cell_id = ?", (cell["id"],))
        for rep in reps.fetchall():
            values = [cell_id if c == "cell_id" else rep[c] for c in rep_cols]
            rep_id = _insert(out, "repetitions", rep_cols, values)
            for table, cols in (("samples", sample_cols), ("epochs", epoch_cols)):
                rows = src.execute(f"SELECT * FROM {table} WHERE repetition_id = ?", (rep["id"],))
                out.executemany(
                    f"INSERT INTO {table} ({', '.join(cols)}) "
                    f"VALUES ({', '.join('?' for _ in cols)})",
                    [[rep_id if c == "repetition_id" else r[c] for c in cols] for r in rows],
                )
