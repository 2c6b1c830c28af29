"""One measurement at a time per machine: the second waits and says so, or refuses."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from stackcost.api import executors
from stackcost.cli import main
from stackcost.execute.machine_lock import MachineBusy, MachineLock

QUICK = ["--min-time", "0.01", "--max-time", "0.2", "--threads", "1", "--quiet"]
RUN = ["run", "mlp", "--backends", "eager", "--resolution", "4", *QUICK]


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """The commands' machine lock at a path of this test's own: the machine-wide one may
    be held by a real stackcost in the other lane, and the planted holder must be the
    only one the command can wait for."""
    path = tmp_path / "machine.lock"

    def at_own_path(*args, **kwargs) -> MachineLock:
        return MachineLock(path, *args, **kwargs)

    monkeypatch.setattr(executors, "MachineLock", at_own_path)
    return path


def test_a_second_holder_waits_for_the_first(tmp_path):
    path = tmp_path / "lock"
    said: list[str] = []
    first = MachineLock(path, who="pid 1: first")
    second = MachineLock(path, on_wait=said.append)
    waiter_done: list[float] = []
    with first.held():
        assert second.busy() == "pid 1: first"

        def wait() -> None:
            with second.held() as waited:
                waiter_done.append(waited)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.6)
        assert not waiter_done  # still waiting while the first holds it
    waiter.join(5)
    assert waiter_done and waiter_done[0] >= 0.5
    assert said and "pid 1: first is measuring" in said[0]
    assert second.busy() is None


def test_no_wait_refuses_when_held(tmp_path):
    path = tmp_path / "lock"
    with MachineLock(path, who="pid 7: other").held():
        try:
            with MachineLock(path, wait=False).held():
                raise AssertionError("took a held lock")
        except MachineBusy as exc:
            assert "pid 7: other" in str(exc) and "--no-wait" in str(exc)


def test_run_no_wait_beside_a_measuring_stackcost_exits_75_and_writes_nothing(
    capsys, tmp_path, machine
):
    db = tmp_path / "s.db"
    with MachineLock(machine, who="pid 7: stackcost run resnet50").held():
        code = main([*RUN, "--no-wait", "--db", str(db)])
    _, err = capsys.readouterr()
    assert code == 75 and "stackcost run resnet50" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not db.exists()


class _Watched:
    """A stream that sets `said` once `words` are written to it, and passes all on."""

    def __init__(self, stream, words: str, said: threading.Event) -> None:
        self.stream, self.words, self.said = stream, words, said

    def write(self, text: str) -> int:
        if self.words in text:
            self.said.set()
        return self.stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def test_run_waits_for_the_machine_and_says_so(capsys, tmp_path, monkeypatch, machine):
    db = tmp_path / "s.db"
    lock = MachineLock(machine, who="pid 7: a long sweep")
    held = threading.Event()
    release = threading.Event()  # set when the run says it waits: then the lock is let go
    monkeypatch.setattr(sys, "stderr", _Watched(sys.stderr, "waiting for the machine", release))

    def hold() -> None:
        with lock.held():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    code = main([*RUN, "--db", str(db)])
    holder.join()
    _, err = capsys.readouterr()
    assert "waiting for the machine: pid 7: a long sweep is measuring" in err
    assert code in (0, 1)  # measured (a disturbed-only run exits 1 with its reason)
    assert db.exists()


def _pinned(cpus: set[int], lock: MachineLock, log: list[tuple[str, float]], hold_s: float):
    """A thread confined to `cpus` (affinity is per thread) that holds `lock` a while."""

    def body() -> None:
        os.sched_setaffinity(0, cpus)
        with lock.held():
            log.append((lock.who, time.monotonic()))
            time.sleep(hold_s)
        log.append((f"{lock.who} done", time.monotonic()))

    return threading.Thread(target=body)


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="needs two CPUs"
)
def test_runs_pinned_to_distinct_cores_hold_the_machine_at_once_never_beside_a_whole_one(
    tmp_path,
):
    path = tmp_path / "lock"
    every = set(range(os.cpu_count() or 2))

    def overlap(a: set[int], b: set[int]) -> bool:
        log: list[tuple[str, float]] = []
        threads = [
            _pinned(a, MachineLock(path, who="a"), log, 0.4),
            _pinned(b, MachineLock(path, who="b"), log, 0.4),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        events = [who for who, _ in sorted(log, key=lambda e: e[1])]
        assert len(events) == 4, events
        return "done" not in events[1]  # the second started before the first finished

    assert overlap({0}, {1})  # distinct cores: side by side
    assert not overlap({0}, {0})  # the same core: one after the other
    assert not overlap(every, {1})  # a whole-machine holder: alone
    assert not overlap({1}, every)
    # Each holder of a core says who it is there, as the machine's holder does.
    assert (tmp_path / "stackcost-core-1.lock").read_text().strip() in ("a", "b")
