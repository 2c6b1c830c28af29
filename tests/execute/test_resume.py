"""Crash safety: SIGKILL at any moment loses nothing; Ctrl-C records the repetition in flight."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest

SPEC = """\
models: [mlp]
backends: [eager, tests.execute.fake_backends:SlowStartBackend]
batch_sizes: [1, 2]
resolutions: [4]
threads: 1
repeats: 2
protocol: {min_time_s: 0.05, max_time_s: 0.3, warmup_max_time_s: 0.1, min_iters: 5}
inherit_env: [STACKCOST_TEST_SLOW_S]
"""
CELLS, REPEATS = 4, 2


def start(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    cmd = [
        sys.executable,
        "-m",
        "stackcost.cli",
        "sweep",
        str(spec),
        "--db",
        str(tmp_path / "s.db"),
        "--quiet",
    ]
    return cmd, subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_sigint
    )


def resume(cmd, timeout: float) -> subprocess.CompletedProcess:
    """The same sweep again, to finish what was stopped. Only the stopped run needs the
    slow backend's 3 s prepare (a repetition in flight to stop): here it is cut to none."""
    env = {**os.environ, "STACKCOST_TEST_SLOW_S": "0"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _default_sigint() -> None:
    """Ctrl-C as from a terminal: a test suite started in the background (`make test &`,
    nohup) hands its children SIGINT ignored, and Python then never raises
    KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stored(tmp_path) -> int:
    try:
        db = sqlite3.connect(tmp_path / "s.db", timeout=5)
        return db.execute("SELECT count(*) FROM repetitions").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def measured(tmp_path) -> int:
    try:
        return sum(counts(tmp_path).values())
    except sqlite3.OperationalError:  # no tables yet
        return 0


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail("timed out waiting for the sweep")


def workers_of(proc) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def counts(tmp_path) -> dict[tuple, int]:
    db = sqlite3.connect(tmp_path / "s.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = db.execute(
        # Distinct repetition indices: a disturbed try that a retry replaced is kept as
        # history under the same index (the view shows the last try).
        "SELECT c.backend, c.batch_size, count(DISTINCT r.repetition) FROM cells c"
        " JOIN repetitions r"
        " ON r.cell_id = c.id WHERE r.status != 'interrupted' GROUP BY c.id"
    ).fetchall()
    return {(b, n): k for b, n, k in rows}


def test_sigkill_then_resume_measures_every_cell_exactly_repeats_times(tmp_path):
    cmd, proc = start(tmp_path)
    # Killed mid-sweep, with a worker in flight, once 2 repetitions are done (a disturbed
    # try and its retry are 2 rows but 1 repetition, so rows alone would not say).
    wait_for(lambda: measured(tmp_path) >= 2)
    wait_for(lambda: bool(workers_of(proc)))
    children = workers_of(proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = sum(counts(tmp_path).values())
    assert 2 <= before < CELLS * REPEATS
    # the orphaned worker dies with its parent instead of measuring on
    psutil.wait_procs(children, timeout=10)
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)

    done = resume(cmd, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resuming run" in done.stderr
    assert counts(tmp_path) == {
        (b, n): REPEATS
        for b in ("eager", "tests.execute.fake_backends:SlowStartBackend")
        for n in (1, 2)
    }
    db = sqlite3.connect(tmp_path / "s.db")
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 1

    again = resume(cmd, timeout=120)
    assert again.returncode == 0
    assert sum(counts(tmp_path).values()) == CELLS * REPEATS  # nothing re-measured


def test_ctrl_c_records_the_repetition_in_flight_as_interrupted(tmp_path):
    cmd, proc = start(tmp_path)
    # The slow backend keeps its worker in prepare for 3 s: interrupt while it waits.
    wait_for(lambda: stored(tmp_path) >= 1)
    wait_for(lambda: bool(workers_of(proc)) and stored(tmp_path) >= 1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    db = sqlite3.connect(tmp_path / "s.db")
    statuses = [s for (s,) in db.execute("SELECT status FROM repetitions")]
    assert statuses[-1] == "interrupted"
    done = resume(cmd, timeout=300)
    assert done.returncode == 0, done.stderr
    assert set(counts(tmp_path).values()) == {REPEATS}
