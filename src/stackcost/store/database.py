"""The store: one SQLite file holding runs, cells, repetitions and raw samples.

Plain tables with unit-suffixed columns so `sqlite3 stackcost.db` is enough to read it.
Each repetition is committed in its own transaction the moment it completes.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stackcost.axes import GRID_COLUMNS
from stackcost.cell import Cell
from stackcost.clip import shown
from stackcost.env import now
from stackcost.errors import SpecError
from stackcost.result import EpochRecord, RateFigures, RepetitionResult
from stackcost.store.check import Snapshot, connect_read_only, snapshot, store_problem

SCHEMA_VERSION = 8

# Training: one row per epoch of a repetition (times in s, rates in samples/s).
EPOCHS_TABLE = """CREATE TABLE IF NOT EXISTS epochs (
    repetition_id INTEGER NOT NULL REFERENCES repetitions(id),
    epoch INTEGER NOT NULL,
    complete INTEGER NOT NULL,
    steps INTEGER NOT NULL, train_samples INTEGER NOT NULL,
    train_loss REAL, train_accuracy REAL, eval_loss REAL, eval_accuracy REAL,
    eval_samples INTEGER,
    epoch_s REAL, train_s REAL, loader_wait_s REAL, step_s REAL, eval_s REAL,
    train_samples_per_s REAL, eval_samples_per_s REAL,
    copy_bytes_per_batch REAL, copy_ms_per_batch REAL, copy_device TEXT, copy_pinned INTEGER,
    PRIMARY KEY (repetition_id, epoch)
) WITHOUT ROWID"""
EPOCH_COLUMNS = (
    "epoch",
    "complete",
    "steps",
    "train_samples",
    "train_loss",
    "train_accuracy",
    "eval_loss",
    "eval_accuracy",
    "eval_samples",
    "epoch_s",
    "train_s",
    "loader_wait_s",
    "step_s",
    "eval_s",
    "train_samples_per_s",
    "eval_samples_per_s",
    "copy_bytes_per_batch",
    "copy_ms_per_batch",
    "copy_device",
    "copy_pinned",
)

# An interleaved A/B comparison (`stackcost ab`): two ordinary runs measured side by side,
# its design (order, threshold, alpha, blocks) and, once done, its verdicts as JSON.
PAIRS_TABLE = """CREATE TABLE IF NOT EXISTS pairs (
    id TEXT PRIMARY KEY,
    base_run TEXT NOT NULL REFERENCES runs(id),
    cand_run TEXT NOT NULL REFERENCES runs(id),
    started_at TEXT NOT NULL,
    finished_at TEXT,
    design_json TEXT NOT NULL,
    verdict_json TEXT
)"""

# `stackcost heldout`: one row per rung and precision of trained weights on held-out data,
# under a run of its own (its command, spec and environment). `model` is the name the
# timing cells of the same network carry and `identity_json` what else makes them the same
# (store/heldout.py joins on both); `metric` names the quality lost that `value` holds:
# accuracy_drop_pt (images) or ppl_increase_pct (decoders).
HELDOUT_TABLE = """CREATE TABLE IF NOT EXISTS heldout (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    model TEXT NOT NULL, identity_json TEXT NOT NULL DEFAULT '{}',
    backend TEXT NOT NULL, precision TEXT NOT NULL, options_json TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL, reason TEXT,
    metric TEXT NOT NULL, value REAL,
    finished_at TEXT NOT NULL,
    record_json TEXT NOT NULL
)"""
HELDOUT_KIND = "heldout"  # the spec_json "kind" of such a run
HELDOUT_COLUMNS = (
    "run_id", "model", "identity_json", "backend", "precision", "options_json", "status",
    "reason", "metric", "value", "finished_at", "record_json",
)  # fmt: skip

# A serve sweep's rates that finished while their repetition had not (its worker or its
# engine died), one row each, committed as each rate ends: the repetition's progress. A
# resume goes on from them; once the repetition finishes, its result holds every rate
# and these rows go (add_repetition), so each rate is stored once.
PROGRESS_TABLE = """CREATE TABLE IF NOT EXISTS progress (
    cell_id INTEGER NOT NULL REFERENCES cells(id),
    repetition INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    finished_at TEXT NOT NULL,
    rate_json TEXT NOT NULL,
    PRIMARY KEY (cell_id, repetition, idx)
) WITHOUT ROWID"""
PROGRESS_COLUMNS = ("cell_id", "repetition", "idx", "finished_at", "rate_json")

# One `stackcost advise` answer: the request, the recommendation and its evidence as JSON,
# and the runs that measured it (screening, finals, the paired comparison).
ADVICE_TABLE = """CREATE TABLE IF NOT EXISTS advice (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    model TEXT NOT NULL,
    recommended TEXT,
    advice_json TEXT NOT NULL
)"""

# The cell's axes, stored as columns so plain SQL can filter on them. `sizes` holds the
# workload's size axes as JSON ('{"seq_len": 128}'); `resolution` repeats an image's.
CELLS_COLUMNS_SQL = """    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    cell_key TEXT NOT NULL,
    model TEXT NOT NULL, backend TEXT NOT NULL, mode TEXT NOT NULL,
    batch_size INTEGER NOT NULL, resolution INTEGER, sizes TEXT NOT NULL DEFAULT '{}',
    precision TEXT NOT NULL, threads INTEGER NOT NULL, device TEXT NOT NULL,
    cell_json TEXT NOT NULL,
    UNIQUE (run_id, cell_key)"""

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    command TEXT,
    spec_json TEXT NOT NULL,
    env_json TEXT NOT NULL,
    git_commit TEXT,
    spec_hash TEXT,
    env_fingerprint TEXT
);
CREATE TABLE IF NOT EXISTS cells (
"""
    + CELLS_COLUMNS_SQL
    + """
);
CREATE TABLE IF NOT EXISTS repetitions (
    id INTEGER PRIMARY KEY,
    cell_id INTEGER NOT NULL REFERENCES cells(id),
    repetition INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    started_at TEXT, finished_at TEXT,
    cold_start_ms REAL,
    n_samples INTEGER,
    median_ms REAL, mean_ms REAL, iqr_ms REAL, p90_ms REAL, p99_ms REAL,
    min_ms REAL, max_ms REAL, ci_low_ms REAL, ci_high_ms REAL, cv REAL,
    throughput_per_s REAL,
    peak_rss_bytes INTEGER, baseline_rss_bytes INTEGER, peak_over_baseline_bytes INTEGER,
    allocator_peak_bytes INTEGER,
    max_abs_err REAL, max_rel_err REAL, tolerance REAL,
    result_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    repetition_id INTEGER NOT NULL REFERENCES repetitions(id),
    iteration INTEGER NOT NULL,
    ns INTEGER NOT NULL,
    PRIMARY KEY (repetition_id, iteration)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS cells_by_key ON cells(cell_key);
"""
    + EPOCHS_TABLE
    + ";\n"
    + PAIRS_TABLE
    + ";\n"
    + HELDOUT_TABLE
    + ";\n"
    + PROGRESS_TABLE
    + ";\n"
    + ADVICE_TABLE
    + ";\n"
)

# Each entry upgrades a store from the version before it to this one.
MIGRATIONS = {
    2: [  # resume: find the run with the same spec in the same environment
        "ALTER TABLE runs ADD COLUMN spec_hash TEXT",
        "ALTER TABLE runs ADD COLUMN env_fingerprint TEXT",
    ],
    3: [EPOCHS_TABLE],  # training: per-epoch records
    4: [  # size axes: resolution becomes one of them (nullable), sizes as JSON
        # (a version-1 store written before its first cell has no cells table yet)
        "CREATE TABLE IF NOT EXISTS cells (id INTEGER PRIMARY KEY, run_id TEXT, cell_key TEXT,"
        " model TEXT, backend TEXT, mode TEXT, batch_size INTEGER, resolution INTEGER,"
        " precision TEXT, threads INTEGER, device TEXT, cell_json TEXT)",
        f"CREATE TABLE cells_v4 ({CELLS_COLUMNS_SQL})",
        "INSERT INTO cells_v4 (id, run_id, cell_key, model, backend, mode, batch_size,"
        " resolution, sizes, precision, threads, device, cell_json)"
        " SELECT id, run_id, cell_key, model, backend, mode, batch_size, resolution,"
        " '{\"resolution\": ' || resolution || '}', precision, threads, device, cell_json"
        " FROM cells",
        "DROP TABLE cells",
        "ALTER TABLE cells_v4 RENAME TO cells",
    ],
    5: [PAIRS_TABLE],  # interleaved A/B: two runs linked as a pair
    6: [HELDOUT_TABLE],  # held-out quality of trained weights, per rung and precision
    7: [PROGRESS_TABLE],  # a serve sweep's finished rates, committed as each ends
    8: [ADVICE_TABLE],  # advise's answers
}
# Migrations that rebuild a table run with foreign keys off (SQLite's documented procedure).
REBUILDS = {4}

CELL_COLUMNS = ("model", "backend", "mode", "batch_size", *GRID_COLUMNS)


class StoreError(SpecError):
    """A store that cannot be used as asked: bad input, so one line and exit 2 (a SpecError)."""


def check_writable(path: Path) -> str | None:
    """Why `path` cannot hold a store, without creating or writing anything; None when it can."""
    problem = store_problem(path, writing=True, newest=SCHEMA_VERSION)
    if problem:
        return problem
    name = shown(str(path))
    if path.exists():
        if not os.access(path, os.W_OK):
            return f"database {name} is not writable"
        return None
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"database directory {shown(str(parent))} does not exist"
    if not os.access(parent, os.W_OK):
        return f"database directory {shown(str(parent))} is not writable"
    return None


class Store:
    """The store at `path`, checked before use (StoreError when damaged or foreign).

    read_only: for report, compare and history; never creates, migrates or writes the
    file, and leaves no -wal/-shm files beside it.
    """

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        problem = store_problem(self.path, writing=not read_only, newest=SCHEMA_VERSION)
        if problem:
            raise StoreError(problem)
        self._unchanged: Snapshot | None = None
        if read_only:
            before = snapshot(self.path)
            self.db, immutable = connect_read_only(self.path)
            self.db.row_factory = sqlite3.Row
            # Immutable reads take no locks: a writer that checkpointed meanwhile shows.
            self._unchanged = before if immutable else None
            self._tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master")}
            return
        self.db = sqlite3.connect(self.path)
        self.db.row_factory = sqlite3.Row
        # WAL: a reader (report, compare) never blocks the writer, and a killed
        # writer leaves the file consistent.
        self.db.execute("PRAGMA journal_mode=WAL")
        with self.db:
            self.db.execute(SCHEMA.split(";")[0])  # meta first: it says what to migrate
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        version = int(row[0]) if row else None
        if version is not None and version > SCHEMA_VERSION:
            self.db.close()
            raise StoreError(
                f"{self.path} has schema {version}, newer than this stackcost's "
                f"{SCHEMA_VERSION}: upgrade stackcost"
            )
        steps = range((version or SCHEMA_VERSION) + 1, SCHEMA_VERSION + 1)
        # Set outside the transaction (SQLite ignores it inside one).
        self.db.execute(f"PRAGMA foreign_keys={'OFF' if REBUILDS & set(steps) else 'ON'}")
        with self.db:
            for step in steps:
                for statement in MIGRATIONS[step]:
                    self.db.execute(statement)
            self.db.executescript(SCHEMA)
            self.db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        self.db.execute("PRAGMA foreign_keys=ON")
        self._tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master")}

    def close(self) -> None:
        """Close; StoreError when a read-only view saw the file change under it."""
        self.db.close()
        if self._unchanged is not None and self._changed():
            raise StoreError(
                f"database {shown(str(self.path))} changed while it was read "
                "(a writer finished meanwhile): run the command again"
            )

    def _changed(self) -> bool:
        try:
            return snapshot(self.path) != self._unchanged
        except OSError:  # removed or replaced meanwhile
            return True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # the exception in flight says more than a changed file would
            self.db.close()

    # -- writes ---------------------------------------------------------------
    def create_run(
        self,
        spec: dict[str, Any],
        env: dict[str, Any],
        command: str = "",
        spec_hash: str | None = None,
        env_fingerprint: str | None = None,
    ) -> str:
        run_id = now()[:10].replace("-", "") + "-" + uuid.uuid4().hex[:8]
        commit = (env.get("project_git") or env.get("stackcost_git") or {}).get("commit")
        with self.db:
            self.db.execute(
                "INSERT INTO runs (id, started_at, command, spec_json, env_json, git_commit,"
                " spec_hash, env_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    now(),
                    command,
                    json.dumps(spec),
                    json.dumps(env),
                    commit,
                    spec_hash,
                    env_fingerprint,
                ),
            )
        return run_id

    def create_pair(self, base_run: str, cand_run: str, design: dict[str, Any]) -> str:
        """Link two runs measured interleaved; returns the pair's id."""
        pair_id = now()[:10].replace("-", "") + "-ab-" + uuid.uuid4().hex[:8]
        with self.db:
            self.db.execute(
                "INSERT INTO pairs (id, base_run, cand_run, started_at, design_json)"
                " VALUES (?, ?, ?, ?, ?)",
                (pair_id, base_run, cand_run, now(), json.dumps(design)),
            )
        return pair_id

    def finish_pair(self, pair_id: str, verdict: dict[str, Any]) -> None:
        """Store the pair's verdicts so far (called after every block: nothing is lost)."""
        with self.db:
            self.db.execute(
                "UPDATE pairs SET finished_at=?, verdict_json=? WHERE id=?",
                (now(), json.dumps(verdict), pair_id),
            )

    def pairs(self) -> list[sqlite3.Row]:
        """Every interleaved pair, oldest first (none in a store older than schema 5)."""
        if "pairs" not in self._tables:
            return []
        return self.db.execute("SELECT * FROM pairs ORDER BY started_at, rowid").fetchall()

    def add_advice(self, model: str, recommended: str | None, advice: dict[str, Any]) -> str:
        """Store one advise answer (its whole record as JSON); returns its id."""
        advice_id = now()[:10].replace("-", "") + "-advice-" + uuid.uuid4().hex[:8]
        with self.db:
            self.db.execute(
                "INSERT INTO advice (id, created_at, model, recommended, advice_json)"
                " VALUES (?, ?, ?, ?, ?)",
                (advice_id, now(), model, recommended, json.dumps(advice)),
            )
        return advice_id

    def advice(self) -> list[sqlite3.Row]:
        """Every stored advise answer, oldest first (none before schema 8)."""
        if "advice" not in self._tables:
            return []
        return self.db.execute("SELECT * FROM advice ORDER BY created_at, id").fetchall()

    def add_heldout(
        self,
        run_id: str,
        model: str,
        identity: dict[str, Any],
        metric: str,
        value: float | None,
        record: dict[str, Any],
        options: dict[str, str] | None = None,
    ) -> None:
        """One rung and precision's held-out result, committed on its own: the quality it
        lost as `metric` says (None where it has no value) and `record`, the whole row
        (its backend, precision, status and reason among the rest), and the options its
        rung was built with (-o BACKEND.KEY=VALUE)."""
        values = (
            run_id, model, json.dumps(identity, sort_keys=True), record["backend"],
            record["precision"], json.dumps(options or {}, sort_keys=True), record["status"],
            record.get("reason") or None, metric, value, now(), json.dumps(record),
        )  # fmt: skip
        with self.db:
            self._insert("heldout", list(HELDOUT_COLUMNS), list(values))

    def heldout(self) -> list[sqlite3.Row]:
        """Every held-out row, oldest first (none in a store older than schema 6)."""
        if "heldout" not in self._tables:
            return []
        return self.db.execute("SELECT * FROM heldout ORDER BY id").fetchall()

    def find_run(self, spec_hash: str, env_fingerprint: str) -> str | None:
        """The latest run of the same spec in the same environment, to resume."""
        row = self.db.execute(
            "SELECT id FROM runs WHERE spec_hash=? AND env_fingerprint=?"
            " ORDER BY started_at DESC, rowid DESC LIMIT 1",
            (spec_hash, env_fingerprint),
        ).fetchone()
        return row[0] if row else None

    def finish_run(self, run_id: str) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET finished_at=? WHERE id=?", (now(), run_id))

    def add_cell(self, run_id: str, cell: Cell) -> int:
        key = cell.key()
        with self.db:
            self.db.execute(
                f"INSERT OR IGNORE INTO cells (run_id, cell_key, {', '.join(CELL_COLUMNS)},"
                f" resolution, sizes, cell_json)"
                f" VALUES ({', '.join('?' * (len(CELL_COLUMNS) + 5))})",
                (
                    run_id,
                    key,
                    *(cell.flat()[c] for c in CELL_COLUMNS),
                    cell.resolution,
                    json.dumps(cell.sizes),
                    cell.model_dump_json(),
                ),
            )
        row = self.db.execute(
            "SELECT id FROM cells WHERE run_id=? AND cell_key=?", (run_id, key)
        ).fetchone()
        return int(row[0])

    def add_progress(self, cell_id: int, repetition: int, index: int, rate: RateFigures) -> None:
        """Rate `index` of a sweep still running (or stopped), committed now; a rate
        already stored at that index is left as it is."""
        with self.db:
            self.db.execute(
                "INSERT OR IGNORE INTO progress VALUES (?, ?, ?, ?, ?)",
                (cell_id, repetition, index, now(), rate.model_dump_json()),
            )

    def progress(self, cell_id: int, repetition: int) -> list[RateFigures]:
        """The rates a repetition's sweep finished and kept, in order (none once it ended)."""
        if "progress" not in self._tables:  # a store from before progress, read as it is
            return []
        rows = self.db.execute(
            "SELECT rate_json FROM progress WHERE cell_id=? AND repetition=? ORDER BY idx",
            (cell_id, repetition),
        )
        return [RateFigures.model_validate_json(r[0]) for r in rows]

    def add_repetition(self, cell_id: int, r: RepetitionResult) -> int:
        """A repetition's try. One that kept rates of an unfinished sweep adds them to its
        progress (stored once, there); one whose sweep finished holds them all, and its
        progress goes."""
        s, m, v = r.stats, r.memory, r.verification
        with self.db:  # one transaction: the repetition and its samples land together
            self.db.executemany(
                "INSERT OR IGNORE INTO progress VALUES (?, ?, ?, ?, ?)",
                (
                    (cell_id, r.repetition, i, now(), rate.model_dump_json())
                    for i, rate in enumerate(r.kept_rates)
                ),
            )
            if r.serving is not None:
                self.db.execute(
                    "DELETE FROM progress WHERE cell_id=? AND repetition=?",
                    (cell_id, r.repetition),
                )
            cur = self.db.execute(
                "INSERT INTO repetitions (cell_id, repetition, status, reason, started_at,"
                " finished_at, cold_start_ms, n_samples, median_ms, mean_ms, iqr_ms, p90_ms,"
                " p99_ms, min_ms, max_ms, ci_low_ms, ci_high_ms, cv, throughput_per_s,"
                " peak_rss_bytes, baseline_rss_bytes, peak_over_baseline_bytes,"
                " allocator_peak_bytes, max_abs_err, max_rel_err, tolerance, result_json)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    cell_id,
                    r.repetition,
                    r.status,
                    r.reason,
                    r.started_at,
                    r.finished_at,
                    r.cold_start_ms,
                    s.n if s else None,
                    s.median_ms if s else None,
                    s.mean_ms if s else None,
                    s.iqr_ms if s else None,
                    s.p90_ms if s else None,
                    s.p99_ms if s else None,
                    s.min_ms if s else None,
                    s.max_ms if s else None,
                    s.ci_low_ms if s else None,
                    s.ci_high_ms if s else None,
                    s.cv if s else None,
                    r.throughput,
                    m.peak_rss_bytes if m else None,
                    m.baseline_rss_bytes if m else None,
                    m.peak_over_baseline_bytes if m else None,
                    m.allocator_peak_bytes if m else None,
                    v.max_abs_err if v else None,
                    v.max_rel_err if v else None,
                    v.tolerance if v else None,
                    # Samples, epochs and kept rates have tables of their own.
                    r.model_dump_json(exclude={"samples_ns", "epochs", "kept_rates"}),
                ),
            )
            rep_id = int(cur.lastrowid)
            self.db.executemany(
                "INSERT INTO samples VALUES (?, ?, ?)",
                ((rep_id, i, ns) for i, ns in enumerate(r.samples_ns)),
            )
            self.db.executemany(
                f"INSERT INTO epochs (repetition_id, {', '.join(EPOCH_COLUMNS)})"
                f" VALUES ({', '.join('?' * (len(EPOCH_COLUMNS) + 1))})",
                ((rep_id, *(getattr(e, c) for c in EPOCH_COLUMNS)) for e in r.epochs),
            )
        return rep_id

    # -- reads ----------------------------------------------------------------
    def run_ids(self) -> list[str]:
        """The measured runs (timing, training, LoadGen), oldest first: a held-out
        evaluation's run holds no cells, and views of runs leave it out (heldout())."""
        return [
            r[0]
            for r in self.db.execute(
                "SELECT id FROM runs WHERE json_extract(spec_json, '$.kind') IS NOT ?"
                " ORDER BY started_at, rowid",
                (HELDOUT_KIND,),
            )
        ]

    def run_row(self, run_id: str) -> sqlite3.Row | None:
        return self.db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()

    def repetitions(
        self, run_id: str, with_samples: bool = True
    ) -> Iterator[tuple[Cell, RepetitionResult]]:
        rows = self.db.execute(
            "SELECT c.cell_json, r.id, r.result_json FROM repetitions r JOIN cells c"
            " ON r.cell_id = c.id WHERE c.run_id=? ORDER BY r.id",
            (run_id,),
        )
        for cell_json, rep_id, result_json in rows.fetchall():
            result = RepetitionResult.model_validate_json(result_json)
            if with_samples:
                result.samples_ns = self.samples(rep_id)
            result.epochs = self.epochs(rep_id)
            yield Cell.model_validate_json(cell_json), result

    def samples(self, repetition_id: int) -> list[int]:
        return [
            r[0]
            for r in self.db.execute(
                "SELECT ns FROM samples WHERE repetition_id=? ORDER BY iteration", (repetition_id,)
            )
        ]

    def epochs(self, repetition_id: int) -> list[EpochRecord]:
        if "epochs" not in self._tables:  # a store from before training, read as it is
            return []
        rows = self.db.execute(
            f"SELECT {', '.join(EPOCH_COLUMNS)} FROM epochs WHERE repetition_id=? ORDER BY epoch",
            (repetition_id,),
        )
        # SQLite keeps NaN as NULL: a diverged loss reads back as NaN, not None.
        return [
            EpochRecord.model_validate(
                {
                    k: (math.nan if v is None and k in ("train_loss", "train_accuracy") else v)
                    for k, v in zip(EPOCH_COLUMNS, row, strict=True)
                }
            )
            for row in rows
        ]

    # -- whole runs, row for row (merge) ------------------------------------------
    def runs_in_start_order(self) -> list[str]:
        """Run ids by start time, then id: the order a merge takes them in."""
        return [r[0] for r in self.db.execute("SELECT id FROM runs ORDER BY started_at, id")]

    def repetition_count(self, run_id: str) -> int:
        (n,) = self.db.execute(
            "SELECT COUNT(*) FROM repetitions r JOIN cells c ON c.id = r.cell_id WHERE c.run_id = ?",
            (run_id,),
        ).fetchone()
        return int(n)

    def copy_run(self, source: Store, run_id: str) -> None:
        """Add `source`'s run as it is stored there (environment, cells, repetitions,
        samples, epochs, held-out rows), in one transaction. Only the row ids of cells and repetitions
        are new: each store counts its own. `source` is only read."""
        src = source.db
        columns = {t: source._columns(t) for t in ("runs", "cells", "repetitions")}
        cell_cols = [c for c in columns["cells"] if c != "id"]
        rep_cols = [c for c in columns["repetitions"] if c != "id"]
        children = [(t, source._columns(t)) for t in ("samples", "epochs")]
        kept = "progress" in source._tables
        run = src.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        with self.db:
            self._insert("runs", columns["runs"], [run[c] for c in columns["runs"]])
            for row in src.execute("SELECT * FROM heldout WHERE run_id = ?", (run_id,)):
                self._insert("heldout", list(HELDOUT_COLUMNS), [row[c] for c in HELDOUT_COLUMNS])
            for cell in src.execute("SELECT * FROM cells WHERE run_id = ?", (run_id,)).fetchall():
                cell_id = self._insert("cells", cell_cols, [cell[c] for c in cell_cols])
                rates = (
                    src.execute(
                        "SELECT * FROM progress WHERE cell_id = ?", (cell["id"],)
                    ).fetchall()
                    if kept
                    else []
                )
                for rate in rates:
                    values = [cell_id if c == "cell_id" else rate[c] for c in PROGRESS_COLUMNS]
                    self._insert("progress", list(PROGRESS_COLUMNS), values)
                reps = src.execute("SELECT * FROM repetitions WHERE cell_id = ?", (cell["id"],))
                for rep in reps.fetchall():
                    values = [cell_id if c == "cell_id" else rep[c] for c in rep_cols]
                    rep_id = self._insert("repetitions", rep_cols, values)
                    for table, cols in children:
                        rows = src.execute(
                            f"SELECT * FROM {table} WHERE repetition_id = ?", (rep["id"],)
                        )
                        self.db.executemany(
                            f"INSERT INTO {table} ({', '.join(cols)}) "
                            f"VALUES ({', '.join('?' for _ in cols)})",
                            [
                                [rep_id if c == "repetition_id" else r[c] for c in cols]
                                for r in rows
                            ],
                        )

    def _columns(self, table: str) -> list[str]:
        return [r[1] for r in self.db.execute(f"PRAGMA table_info({table})")]

    def _insert(self, table: str, columns: list[str], values: list) -> int:
        marks = ", ".join("?" for _ in columns)
        cursor = self.db.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", values
        )
        return int(cursor.lastrowid or 0)
