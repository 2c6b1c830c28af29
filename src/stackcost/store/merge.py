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
        for i, source in enumerate(sources):
            copy = Path(tmp) / f"{i}.db"
            _copy(source, copy)
            # The copy is migrated to this schema by opening it: the source is only read.
            with Store(copy) as src:
                _merge_one(out, src, str(source), merged)
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


def _merge_one(out: Store, src: Store, name: str, merged: Merged) -> None:
    known = set(out.runs_in_start_order())  # held-out runs too
    added, dupes = merged.added.setdefault(name, []), merged.duplicates.setdefault(name, [])
    for run_id in src.runs_in_start_order():
        if run_id in known:
            dupes.append(run_id)
            theirs, ours = src.repetition_count(run_id), out.repetition_count(run_id)
            if theirs != ours:
                merged.differing.append(
                    f"run {run_id}: kept the first copy ({ours} repetitions); {name} has {theirs}"
                )
            continue
        out.copy_run(src, run_id)
        added.append(run_id)
        known.add(run_id)
