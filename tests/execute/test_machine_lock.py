"""One measurement at a time per machine: the second waits and says so, or refuses."""

from __future__ import annotations

import sys
import threading
import time

from stackcost.cli import main
from stackcost.execute.machine_lock import MachineBusy, MachineLock

QUICK = ["--min-time", "0.01", "--max-time", "0.2", "--threads", "1", "--quiet"]
RUN = ["run", "mlp", "--backends", "eager", "--resolution", "4", *QUICK]


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


def test_run_no_wait_beside_a_measuring_stackcost_exits_75_and_writes_nothing(capsys, tmp_path):
    db = tmp_path / "s.db"
    with MachineLock(who="pid 7: stackcost run resnet50").held():  # the machine-wide lock
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


def test_run_waits_for_the_machine_and_says_so(capsys, tmp_path, monkeypatch):
    db = tmp_path / "s.db"
    lock = MachineLock(who="pid 7: a long sweep")
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
