"""One measurement at a time per machine.

Two stackcost processes measuring at once measure each other (an mlp median of 13 ms
against 44 us alone was seen). Each repetition holds an exclusive flock on one file
that every stackcost process on the machine agrees on; a second process waits for it
and says so, or, with --no-wait, refuses. The kernel drops a flock when its holder
dies, so a killed run never leaves the machine locked. Writers to one store need no
such lock: SQLite already serializes them.

This lock is the whole machine. Repetitions on Ray nodes hold it shared and, each,
exclusive locks on the cores they pin (execute/cores.py): they run beside each other on
distinct cores, never beside a local run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

# Fixed, not tempfile.gettempdir(): TMPDIR differs between processes, the machine does not.
DEFAULT_PATH = Path("/tmp/stackcost-machine.lock")
# How often a waiting process tries again, and how often it repeats that it waits.
POLL_S = 0.2
REMIND_S = 60.0


class MachineBusy(RuntimeError):
    """Another stackcost process is measuring, and this one was told not to wait."""


def open_lock_file(path: Path) -> int:
    # World-writable so that another user's stackcost can take it too; a read-only fd
    # (someone else's file with a stricter umask) still takes a flock on Linux.
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


def holder(path: Path = DEFAULT_PATH) -> str:
    """Who holds (or last held) the lock, as its holder wrote it: 'pid N: command'."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


class MachineLock:
    def __init__(
        self,
        path: Path = DEFAULT_PATH,
        wait: bool = True,
        on_wait: Callable[[str], None] | None = None,
        who: str = "",
    ) -> None:
        self.path, self.wait, self.on_wait = path, wait, on_wait
        self.who = who or f"pid {os.getpid()}"

    def busy(self) -> str | None:
        """Who is measuring now, or None when nobody is (a probe: takes and drops it)."""
        fd = open_lock_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return holder(self.path) or "another process"
        finally:
            os.close(fd)  # closing drops the lock if it was taken
        return None

    @contextlib.contextmanager
    def held(self) -> Iterator[float]:
        """Hold the machine for one repetition; yields the seconds spent waiting for it."""
        fd = open_lock_file(self.path)
        try:
            waited = self._acquire(fd)
            with contextlib.suppress(OSError):  # a read-only fd cannot say who holds it
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{self.who}\n".encode(), 0)
            yield waited
        finally:
            os.close(fd)

    def _acquire(self, fd: int) -> float:
        start = time.monotonic()
        reminded = -REMIND_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return time.monotonic() - start
            except BlockingIOError:
                pass
            other = holder(self.path) or "another process"
            if not self.wait:
                raise MachineBusy(
                    f"another stackcost is measuring on this machine ({other}); "
                    "--no-wait refuses to share it (drop --no-wait to queue behind it)"
                )
            waited = time.monotonic() - start
            if self.on_wait and waited - reminded >= REMIND_S:
                reminded = waited
                self.on_wait(
                    f"waiting for the machine: {other} is measuring "
                    f"({waited:.0f} s so far; two measurements at once skew both)"
                )
            time.sleep(POLL_S)
