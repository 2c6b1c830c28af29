"""Acceptance: a run beside real CPU burners is `disturbed` (or retries to a clean
result) and never `ok`; the same run alone is not disturbed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from stackcost.env import cores
from stackcost.execute.runner import execute
from stackcost.measure.protocol import Protocol
from stackcost.runspec.run import RunSpec, model_ref
from stackcost.store.database import Store

# Long enough that /proc/stat's tick slack is small (2 ticks x 2 CPUs / 0.4 s = 0.1 core).
PROTOCOL = Protocol(min_time_s=0.4, max_time_s=0.8, warmup_max_time_s=0.3, check_interval_s=0.02)


@contextmanager
def burners(n: int) -> Iterator[list[subprocess.Popen]]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        stop(procs)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def spec() -> RunSpec:
    return RunSpec(
        models=[model_ref("mlp")],
        backends=["eager"],
        resolutions=[8],
        batch_sizes=[4],
        threads=[1],
        protocol=PROTOCOL,
    )


def stored(db) -> list[tuple[str, str]]:
    """Each stored repetition's (status, reason), in the order stored."""
    import sqlite3

    return list(sqlite3.connect(db).execute("SELECT status, reason FROM repetitions"))


def statuses(db) -> list[str]:
    return [status for status, _ in stored(db)]


@pytest.mark.whole_machine  # a burner on every core
def test_beside_burners_a_kept_repetition_is_disturbed_never_ok(tmp_path, warm_executor):
    with burners(cores()), Store(tmp_path / "s.db") as store:
        result = execute(spec(), store, executor=warm_executor, on_disturbed="keep")
    ((_, rep),) = result.records
    assert rep.status == "disturbed", (rep.status, rep.reason, rep.disturbance)
    assert rep.disturbance.others_cores >= 0.9  # at least one burner's core
    assert "other processes used" in rep.reason
    assert rep.stats is not None  # the numbers are kept, marked, not trusted
    assert statuses(tmp_path / "s.db") == ["disturbed"]


@pytest.mark.whole_machine  # a burner on every core
def test_retry_waits_out_the_burners_and_stores_a_clean_result(tmp_path, warm_executor):
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores())]
    retries: list[int] = []

    def on_retry(cell, result, attempt, of):  # the burners end after the first try
        retries.append(attempt)
        stop(procs)

    try:
        with Store(tmp_path / "s.db") as store:
            result = execute(spec(), store, executor=warm_executor, on_retry=on_retry)
    finally:
        stop(procs)
    ((_, rep),) = result.records  # the view holds the last try only
    assert retries == [1]
    assert rep.status in ("ok", "unstable"), (rep.status, rep.reason)
    assert [a.others_cores >= 0.9 for a in rep.disturbance.attempts] == [True]
    assert statuses(tmp_path / "s.db")[0] == "disturbed"  # the disturbed try is kept as history


def test_the_same_run_alone_is_not_disturbed(tmp_path, warm_executor):
    with Store(tmp_path / "s.db") as store:
        result = execute(spec(), store, executor=warm_executor, on_disturbed="keep")
    ((_, rep),) = result.records
    assert rep.status in ("ok", "unstable"), (rep.reason, rep.disturbance)
    assert rep.disturbance.others_cores < rep.disturbance.threshold_cores


@pytest.mark.whole_machine  # a burner on every core
def test_fail_stops_the_run_after_storing_the_disturbed_repetition(tmp_path, warm_executor):
    two = spec().model_copy(update={"batch_sizes": [4, 8]})
    with burners(cores()), Store(tmp_path / "s.db") as store:
        result = execute(two, store, executor=warm_executor, on_disturbed="fail")
    assert "--on-disturbed fail stops the run" in result.stopped
    assert statuses(tmp_path / "s.db") == ["disturbed"]  # the second cell never ran


@pytest.mark.whole_machine  # a burner on every core keeps the retry waiting
def test_ctrl_c_while_waiting_to_retry_stores_the_repetition_as_interrupted(
    tmp_path, warm_executor
):
    retried: list[str] = []

    def on_retry(cell, result, attempt, of):  # Ctrl-C lands in the wait for a quiet machine
        retried.append(result.reason)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()

    # Ctrl-C as from a terminal: a suite started in the background (`make test &`, nohup)
    # has SIGINT ignored, and Python then never raises KeyboardInterrupt.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with burners(cores()), Store(tmp_path / "s.db") as store:
            try:
                execute(spec(), store, executor=warm_executor, on_retry=on_retry)
            except KeyboardInterrupt:
                pass
            else:
                pytest.fail(
                    f"no KeyboardInterrupt; retries {retried}, stored {stored(tmp_path / 's.db')}"
                )
    finally:
        signal.signal(signal.SIGINT, before)
    # the disturbed try is history; the repetition itself is owed, so a resume runs it
    assert statuses(tmp_path / "s.db") == ["disturbed", "interrupted"]
