import sqlite3

from stackcost.measure.stats import summarize
from stackcost.result import Memory, RepetitionResult
from stackcost.runs import RunResult
from stackcost.store import SCHEMA_VERSION, Store, check_writable
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
    assert version == str(SCHEMA_VERSION) == "3"
