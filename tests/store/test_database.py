import sqlite3

import pytest

from stackcost.errors import SpecError
from stackcost.measure.stats import summarize
from stackcost.result import Memory, RepetitionResult
from stackcost.store.database import SCHEMA_VERSION, Store, StoreError, check_writable
from stackcost.store.runs import RunResult
from stackcost.verify import Verification
from tests.conftest import tiny_cell


def _result(samples):
    return RepetitionResult(
        status="ok",
        stats=summarize(samples),
        samples_ns=samples,
        throughput=2.0,
        cold_start_ms=12.5,
        memory=Memory(baseline_rss_bytes=100, peak_rss_bytes=300, peak_over_baseline_bytes=200),
        verification=Verification(max_abs_err=1e-7, max_rel_err=1e-8, tolerance=1e-4, ok=True),
        details={"variant": "trace"},
    )


def test_round_trip(tmp_path):
    path = tmp_path / "s.db"
    samples = [1_000_000 + i for i in range(20)]
    with Store(path) as store:
        run_id = store.create_run({"spec": 1}, {"env": 2}, "stackcost run mlp")
        cell = tiny_cell()
        cell_id = store.add_cell(run_id, cell)
        assert store.add_cell(run_id, cell) == cell_id  # idempotent per run
        store.add_repetition(cell_id, _result(samples))
        store.finish_run(run_id)
    with Store(path) as store:
        loaded = RunResult.from_store(store, run_id)
    ((got_cell, got),) = loaded.records
    assert got_cell == cell and got.samples_ns == samples
    assert got.stats.median_ms == summarize(samples).median_ms
    assert got.details == {"variant": "trace"} and loaded.env == {"env": 2}
    df = loaded.to_dataframe()
    assert df.loc[0, "median_ms"] == got.stats.median_ms and df.loc[0, "backend"] == "eager"


def test_plain_sqlite3_can_read_it(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as store:
        run_id = store.create_run({}, {})
        store.add_repetition(store.add_cell(run_id, tiny_cell()), _result([5, 6, 7]))
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION)
    assert db.execute("SELECT status, median_ms FROM repetitions").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM samples").fetchone()[0] == 3


def test_check_writable_does_not_create(tmp_path):
    assert check_writable(tmp_path / "new.db") is None
    assert not (tmp_path / "new.db").exists()
    assert "does not exist" in check_writable(tmp_path / "missing" / "x.db")
    assert "is a directory" in check_writable(tmp_path)
    bogus = tmp_path / "text.db"
    bogus.write_text("hello, not sqlite")
    assert "not a SQLite file" in check_writable(bogus)


def test_a_version_1_store_is_migrated(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE runs (id TEXT PRIMARY KEY, started_at TEXT NOT NULL, finished_at TEXT,"
        " command TEXT, spec_json TEXT NOT NULL, env_json TEXT NOT NULL, git_commit TEXT);"
        "INSERT INTO runs VALUES ('old', 't', NULL, 'c', '{}', '{}', NULL);"
    )
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.run_ids() == ["old"]
        run_id = store.create_run({}, {}, spec_hash="s", env_fingerprint="e")
        assert store.find_run("s", "e") == run_id
    version = sqlite3.connect(path).execute("SELECT value FROM meta").fetchone()[0]
    assert version == str(SCHEMA_VERSION) == "8"


def test_an_ab_pair_links_two_runs_and_keeps_its_verdict(tmp_path):
    path = tmp_path / "ab.db"
    with Store(path) as store:
        base, cand = store.create_run({}, {}), store.create_run({}, {})
        pair = store.create_pair(base, cand, {"order": "ABBA"})
        store.finish_pair(pair, {"cells": []})
    with Store(path, read_only=True) as store:
        (row,) = store.pairs()
        assert (row["id"], row["base_run"], row["cand_run"]) == (pair, base, cand)
        assert row["verdict_json"] == '{"cells": []}'


def test_a_version_4_store_opens_read_only_with_no_pairs():
    from pathlib import Path

    old = Path(__file__).parent / "fixtures" / "main-f73be3d.db"
    with Store(old, read_only=True) as store:
        assert store.run_ids() and store.pairs() == []


def test_a_version_3_store_keeps_its_image_cells_and_their_keys(tmp_path):
    """Schema 4 makes resolution one size axis among others: an old cell row is rebuilt
    with sizes '{"resolution": N}', loads as the same Cell, and keeps its key."""
    path = tmp_path / "v3.db"
    cell = tiny_cell()
    old_json = cell.model_dump_json(exclude={"sizes"})[:-1] + ', "resolution": 4}'
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '3');"
        "CREATE TABLE runs (id TEXT PRIMARY KEY, started_at TEXT NOT NULL, finished_at TEXT,"
        " command TEXT, spec_json TEXT NOT NULL, env_json TEXT NOT NULL, git_commit TEXT,"
        " spec_hash TEXT, env_fingerprint TEXT);"
        "INSERT INTO runs VALUES ('old', 't', 't', 'c', '{}', '{}', NULL, NULL, NULL);"
        "CREATE TABLE cells (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id),"
        " cell_key TEXT NOT NULL, model TEXT NOT NULL, backend TEXT NOT NULL,"
        " mode TEXT NOT NULL, batch_size INTEGER NOT NULL, resolution INTEGER NOT NULL,"
        " precision TEXT NOT NULL, threads INTEGER NOT NULL, device TEXT NOT NULL,"
        " cell_json TEXT NOT NULL, UNIQUE (run_id, cell_key));"
    )
    db.execute(
        "INSERT INTO cells VALUES (1, 'old', ?, 'mlp', 'eager', 'infer', 2, 4, 'fp32', 1,"
        " 'cpu', ?)",
        (cell.key(), old_json),
    )
    db.commit()
    db.close()
    with Store(path) as store:
        store.add_repetition(1, _result([5, 6, 7]))
        [(loaded, _)] = list(store.repetitions("old"))
    assert loaded == cell and loaded.key() == cell.key() and loaded.resolution == 4
    row = sqlite3.connect(path).execute("SELECT resolution, sizes FROM cells").fetchone()
    assert row == (4, '{"resolution": 4}')


def _wal_store(path):
    with Store(path) as store:
        run_id = store.create_run({}, {})
        store.add_repetition(store.add_cell(run_id, tiny_cell()), _result([5, 6, 7]))
    return run_id


def _files(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_read_only_leaves_the_bytes_and_no_wal_files(tmp_path):
    run_id = _wal_store(tmp_path / "s.db")
    before = _files(tmp_path)
    assert set(before) == {"s.db"}  # WAL mode, closed: the log was folded back in
    with Store(tmp_path / "s.db", read_only=True) as store:
        assert store.run_ids() == [run_id]
        assert len(RunResult.from_store(store, run_id).records) == 1
    assert _files(tmp_path) == before


def test_read_only_beside_a_live_writer_sees_its_commits(tmp_path):
    path = tmp_path / "s.db"
    _wal_store(path)
    with Store(path) as writer:
        new = writer.create_run({}, {})
        assert (tmp_path / "s.db-wal").exists()  # the commit is in the log only
        with Store(path, read_only=True) as reader:
            assert new in reader.run_ids()
        with Store(path) as second_writer:  # concurrent writers keep working
            second_writer.finish_run(new)
        writer.finish_run(new)
    assert set(_files(tmp_path)) == {"s.db"}


def test_read_only_reads_an_old_store_without_migrating_it(tmp_path):
    path = tmp_path / "v2.db"
    run_id = _wal_store(path)
    db = sqlite3.connect(path)
    db.executescript("DROP TABLE epochs; UPDATE meta SET value='2' WHERE key='schema_version';")
    db.close()
    before = _files(tmp_path)
    with Store(path, read_only=True) as store:
        ((_, rep),) = RunResult.from_store(store, run_id).records
        assert rep.epochs == []
    assert _files(tmp_path) == before


def test_read_only_says_so_when_a_writer_changed_the_file_meanwhile(tmp_path):
    path = tmp_path / "s.db"
    _wal_store(path)
    reader = Store(path, read_only=True)
    with Store(path) as writer:  # opens, commits, checkpoints into the main file, closes
        writer.create_run({}, {})
    with pytest.raises(StoreError, match="changed while it was read"):
        reader.close()


@pytest.mark.parametrize("content", [b"", None], ids=["0-byte", "sqlite-without-tables"])
def test_a_writer_makes_a_store_of_an_empty_file_a_reader_refuses_it(tmp_path, content):
    path = tmp_path / "s.db"
    if content is None:
        sqlite3.connect(path).execute("PRAGMA user_version = 1").connection.close()
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="empty|no stackcost store"):
        Store(path, read_only=True)
    assert path.read_bytes() == before and set(_files(tmp_path)) == {"s.db"}
    assert check_writable(path) is None
    with Store(path) as store:
        assert store.run_ids() == []


def test_a_writer_refuses_a_foreign_or_damaged_file_untouched(tmp_path):
    foreign = tmp_path / "foreign.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    damaged = tmp_path / "damaged.db"
    _wal_store(tmp_path / "good.db")
    damaged.write_bytes((tmp_path / "good.db").read_bytes()[:5000])
    before = _files(tmp_path)
    for path, message in ((foreign, "not a stackcost store"), (damaged, "damaged")):
        assert message in check_writable(path)
        with pytest.raises(StoreError, match=message):
            Store(path)
    assert _files(tmp_path) == before
    assert issubclass(StoreError, SpecError)  # the CLI prints it as one line, exit 2


def _rate(label: str):
    from stackcost.result import RateFigures, Spread

    return RateFigures(
        label=label, target_rps=None, process="sequential", sent=4, completed=4, failed=0,
        duration_s=1.0, request_rps=4.0, output_tokens_per_s=16.0, goodput_rps=None,
        ttft_ms=Spread(), tpot_ms=Spread(), itl_ms=Spread(), e2e_ms=Spread(),
        queueing_ms=Spread(), lateness_ms=Spread(), in_flight_peak=1,
    )  # fmt: skip


def test_a_sweeps_rates_are_stored_once_as_progress_until_its_repetition_holds_them(tmp_path):
    from stackcost.result import ServeResult

    path, other = tmp_path / "s.db", tmp_path / "merged.db"
    with Store(path) as store:
        run_id = store.create_run({}, {})
        cell_id = store.add_cell(run_id, tiny_cell())
        store.add_progress(cell_id, 0, 0, _rate("one at a time"))
        store.add_progress(cell_id, 0, 0, _rate("again"))  # an index lands once
        # A try that stopped keeps what it finished as progress, not in its own JSON.
        stopped = RepetitionResult(
            status="crashed", reason="worker died", kept_rates=[_rate("one"), _rate("burst")]
        )
        store.add_repetition(cell_id, stopped)
        assert [r.label for r in store.progress(cell_id, 0)] == ["one at a time", "burst"]
        assert store.progress(cell_id, 1) == []
        raw = store.db.execute("SELECT result_json FROM repetitions").fetchone()[0]
        assert "kept_rates" not in raw
    with Store(other) as merged, Store(path, read_only=True) as source:
        merged.copy_run(source, run_id)  # a merge keeps a run's progress with its cells
        (cell_row,) = merged.db.execute("SELECT id FROM cells").fetchall()
        assert len(merged.progress(cell_row[0], 0)) == 2
    with Store(path) as store:
        # The repetition that finished the sweep holds every rate: its progress goes.
        done = RepetitionResult(
            status="ok",
            serving=ServeResult(
                engine="e", transport="t", prompt_len=8, new_tokens=4, lengths="fixed",
                arrivals="poisson", rates=[_rate("one at a time"), _rate("burst")], budget_s=60,
            ),
        )  # fmt: skip
        store.add_repetition(cell_id, done)
        assert store.progress(cell_id, 0) == []
        (_, stopped_again), (_, finished) = list(store.repetitions(run_id))
    assert stopped_again.kept_rates == [] and len(finished.serving.rates) == 2
