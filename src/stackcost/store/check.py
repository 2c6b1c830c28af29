"""Is a file a sound stackcost store? Asked read-only, before anything writes to it.

A damaged file is refused in one line instead of failing mid-run with a traceback, and
a file that belongs to something else never gets stackcost's schema written into it.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from stackcost.clip import one_line, shown

SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_MODE = 2  # header byte 18: the file's journal is a write-ahead log
# Tables any version of the store has had; a reader needs all of them.
STORE_TABLES = {"meta", "runs", "cells", "repetitions", "samples"}

Snapshot = tuple[int, int, int]  # (inode, size, mtime_ns) of the main file


def wal_of(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def snapshot(path: Path) -> Snapshot:
    st = path.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def connect_read_only(path: Path, timeout_s: float = 10.0) -> tuple[sqlite3.Connection, bool]:
    """A connection that can neither write `path` nor leave files beside it; and whether
    it reads the main file as immutable.

    mode=ro alone creates -wal and -shm beside a WAL-mode file and, being read-only,
    cannot remove them again. With no -wal no other connection is open (the last one
    to close removes it), so the main file holds every commit: it is read immutable,
    without those files. Otherwise they exist already and mode=ro shares them, with
    the locks, with the live writer.
    """
    with path.open("rb") as f:
        header = f.read(100)
    immutable = len(header) > 18 and header[18] == WAL_MODE and not wal_of(path).exists()
    query = "?mode=ro&immutable=1" if immutable else "?mode=ro"
    db = sqlite3.connect(path.resolve().as_uri() + query, uri=True, timeout=timeout_s)
    return db, immutable


def store_problem(path: Path, *, writing: bool, newest: int) -> str | None:
    """Why `path` is not a store to write (`writing`) or read; None when it is.

    A missing, empty (0-byte) or table-less file is a new store to a writer (SQLite
    itself leaves a 0-byte file behind a connect), and holds no runs for a reader.
    `newest` is the schema version this stackcost writes.
    """
    name = shown(str(path))
    if path.is_dir():
        return f"database path {name} is a directory"
    if not path.exists():
        return None if writing else f"no database at {name}"
    if not path.is_file():
        return f"database {name} is not a regular file"
    try:
        with path.open("rb") as f:
            header = f.read(100)
    except OSError as exc:
        return f"database {name} cannot be read ({exc.strerror})"
    if not header:
        return None if writing else f"database {name} is empty (0 bytes): it holds no runs"
    if header[:16] != SQLITE_MAGIC:
        return f"database {name} exists and is not a SQLite file: use another --db"
    if not wal_of(path).exists():  # else a live writer may be growing the file
        short = _truncation(path, header)
        if short:
            return damaged(name, short)
    try:
        db, _ = connect_read_only(path)
        try:
            return _contents_problem(db, name, writing, newest)
        finally:
            db.close()
    except sqlite3.OperationalError as exc:  # locked, or its -wal/-shm cannot be opened
        return f"database {name} cannot be opened ({one_line(str(exc), 80)})"
    except sqlite3.DatabaseError as exc:  # malformed, not a database
        return damaged(name, one_line(str(exc), 80))


def damaged(name: str, why: str) -> str:
    return (
        f"database {name} is damaged ({why}); left untouched: "
        "restore it from a backup or use another --db"
    )


def _truncation(path: Path, header: bytes) -> str | None:
    """The file is shorter than its header says (SQLite itself only notices on read)."""
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    size = os.stat(path).st_size
    if len(header) < 100 or page_size < 512 or size % page_size:
        return f"truncated: {size} bytes is not a whole number of {page_size}-byte pages"
    pages = int.from_bytes(header[28:32], "big")
    valid = header[92:96] == header[24:28]  # the page count is current (SQLite >= 3.7)
    if valid and size < pages * page_size:
        return f"truncated: {size} bytes, its header says {pages * page_size}"
    return None


def _contents_problem(db: sqlite3.Connection, name: str, writing: bool, newest: int) -> str | None:
    (first,) = db.execute("PRAGMA quick_check(1)").fetchone()
    if first != "ok":
        return damaged(name, one_line(first, 80))
    tables = {
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    if not tables:
        return None if writing else f"database {name} holds no stackcost store (no tables)"
    columns = [r[1] for r in db.execute("PRAGMA table_info(meta)")]
    if columns != ["key", "value"]:
        listed = one_line(", ".join(sorted(tables)), 60)
        return (
            f"database {name} is a SQLite file but not a stackcost store "
            f"(its tables: {listed}): use another --db"
        )
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is None:  # a writer is creating it right now: meta comes first
        return None if writing else f"database {name} is still being created: it holds no runs"
    try:
        version = int(row[0])
    except (TypeError, ValueError):
        return damaged(name, f"schema version {shown(row[0], 20)} is not a number")
    if version > newest:
        return (
            f"database {name} has schema {version}, newer than this stackcost's {newest}: "
            "upgrade stackcost"
        )
    missing = STORE_TABLES - tables
    if missing and not writing:
        return damaged(name, f"tables missing: {', '.join(sorted(missing))}")
    return None
