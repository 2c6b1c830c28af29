"""Warm worker start: forked workers behave as cold ones do, and are labelled warm."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from stackcost.execute.local import LocalExecutor
from stackcost.execute.machine_lock import MachineLock
from stackcost.result import MEASURED_STATUSES
from tests.conftest import tiny_task

FAKE = "tests.execute.fake_backends"
# These tests are about an executor's own starters: not the suite's shared ones.
pytestmark = pytest.mark.own_starters


def _executor(tmp_path, **kw) -> LocalExecutor:
    return LocalExecutor(lock=MachineLock(tmp_path / "lock"), **kw)


def _map(executor: LocalExecutor, tasks):
    return [result for _, result in executor.map(tasks)]


def test_repetitions_in_a_map_fork_from_one_starter(tmp_path):
    executor = _executor(tmp_path)
    tasks = [tiny_task(tmp_path / str(i)).model_copy(update={"repetition": i}) for i in range(3)]
    results = _map(executor, tasks)
    for r in results:
        assert r.status in MEASURED_STATUSES, r.reason + r.log_tail
        assert r.verification.ok and r.details["worker_start"]["kind"] == "warm"
    # One starter served all three (same environment): its import is paid once.
    imports = {r.details["worker_start"]["starter_import_s"] for r in results}
    assert len(imports) == 1
    # Each repetition is its own process, and none imports torch again.
    assert all(r.phases.import_s < 1.0 for r in results)
    assert not executor._starters  # closed when the map ended


def test_cold_start_is_kept_on_request_and_for_a_lone_run(tmp_path):
    results = _map(_executor(tmp_path, worker_start="cold"), [tiny_task(tmp_path)])
    assert results[0].details["worker_start"] == {"kind": "cold"}
    lone = _executor(tmp_path).run(tiny_task(tmp_path / "lone"))
    assert lone.details["worker_start"] == {"kind": "cold"}


def test_crash_hang_and_exception_are_results_as_with_a_cold_worker(tmp_path):
    executor = _executor(tmp_path)
    tasks = [
        tiny_task(tmp_path / "a", f"{FAKE}:AbortBackend"),
        tiny_task(tmp_path / "h", f"{FAKE}:HangBackend", timeout_s=2),
        tiny_task(tmp_path / "r", f"{FAKE}:RaiseBackend"),
        tiny_task(tmp_path / "e"),
    ]
    abort, hang, error, fine = _map(executor, tasks)
    assert abort.status == "crashed" and "SIGABRT" in abort.reason
    assert hang.status == "timeout" and "2 s" in hang.reason
    assert error.status == "failed" and "Traceback" in error.log_tail
    # The starter outlived all three: the last repetition still forked from it.
    assert fine.status in MEASURED_STATUSES and fine.details["worker_start"]["kind"] == "warm"


def test_a_dead_starter_fails_one_repetition_and_is_replaced(tmp_path):
    executor = _executor(tmp_path)
    tasks = iter([tiny_task(tmp_path / "1"), tiny_task(tmp_path / "2"), tiny_task(tmp_path / "3")])
    stream = executor.map(tasks)
    first = next(stream)[1]
    assert first.details["worker_start"]["kind"] == "warm"
    (starter,) = executor._starters.values()
    os.kill(starter.proc.pid, signal.SIGKILL)
    starter.proc.wait()
    rest = [result for _, result in stream]
    # Found dead before the fork: a new starter serves the next ones; nothing is lost.
    assert all(r.status in MEASURED_STATUSES for r in rest), [r.reason for r in rest]
    assert all(r.details["worker_start"]["kind"] == "warm" for r in rest)


def test_the_starter_imports_a_hugging_face_workers_modules_once_before_forking(tmp_path):
    from stackcost.execute.local import preload
    from stackcost.execute.warm_start import PRELOAD_HF, WarmStarter

    task = tiny_task(tmp_path / "t")
    assert preload(task) == ()
    hf = task.cell.model_copy(
        update={"model": task.cell.model.model_copy(update={"name": "hf:bert"})}
    )
    assert preload(task.model_copy(update={"cell": hf})) == PRELOAD_HF
    # A worker module that writes whether `colorsys` was imported before it ran, and exits
    # as a finished worker does (a forked child that returns is counted a failure).
    (tmp_path / "seen_mod.py").write_text(
        "import os, sys\nopen(sys.argv[1], 'w').write(str('colorsys' in sys.modules))\n"
        "os._exit(0)\n"
    )
    starter = WarmStarter(sys.executable, {**os.environ, "PYTHONPATH": str(tmp_path)})
    try:
        for name, preloaded, want in (("a", (), "False"), ("b", ("colorsys",), "True"),
                                      ("c", (), "True")):  # fmt: skip
            out, log = tmp_path / name, str(tmp_path / f"{name}.log")
            worker = starter.start("seen_mod", [str(out)], log, preload=preloaded)
            assert worker.wait(60) == 0, Path(log).read_text()
            assert out.read_text() == want, name  # c: the starter keeps what it imported
    finally:
        starter.close()
