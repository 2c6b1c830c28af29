"""One measurement at a time per machine.

Two stackcost processes measuring at once measure each other (an mlp median of 13 ms
against 44 us alone was seen). Each repetition holds an exclusive flock on one file
that every stackcost process on the machine agrees on; a second process waits for it
and says so, or, with --no-wait, refuses. The kernel drops a flock when its holder
dies, so a killed run never leaves the machine locked. Writers to one store need no
such lock: SQLite already serializes them.

This lock is the whole machine. Repetitions on Ray nodes hold it shared and, each,
exclusive locks on the cores they pin (execute/cores.py): they run beside each other on
distinct cores, never beside a local run. A local run confined to some of the machine's
cores (`taskset -c 0 stackcost run ...`, a test lane) is held the same way, on the cores
it may run on: its workers inherit that affinity and its disturbance check counts those
cores alone (measure/counters.pinned_cpus), so two runs pinned to distinct cores measure
beside each other, and neither beside an unpinned run, which holds the whole machine.
They still share the memory bus and the last-level cache, as Ray nodes on one host do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from stackcost.measure.counters import pinned_cpus

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


def core_lock_path(cpu: int, directory: Path = DEFAULT_PATH.parent) -> Path:
    """The flock file of one core, beside the machine lock."""
    return directory / f"stackcost-core-{cpu}.lock"


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
        """Hold the machine for one repetition (or, in a process confined to some of its
        cores, the machine shared and those cores: the module docstring); yields the
        seconds spent waiting for it."""
        cores = pinned_cpus()
        fds = [open_lock_file(self.path)]
        fds += [open_lock_file(core_lock_path(c, self.path.parent)) for c in sorted(cores or ())]
        try:
            waited = self._acquire(fds, shared=cores is not None)
            for fd in fds:
                with contextlib.suppress(OSError):  # a read-only fd cannot say who holds it
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{self.who}\n".encode(), 0)
            yield waited
        finally:
            for fd in fds:
                os.close(fd)  # closing drops its flock

    @staticmethod
    def _take(fds: list[int], shared: bool) -> bool:
        """The machine (first fd: exclusive, or shared with the cores after it exclusive),
        all or nothing, so two waiters never hold half of what each needs."""
        taken: list[int] = []
        for i, fd in enumerate(fds):
            mode = fcntl.LOCK_SH if shared and i == 0 else fcntl.LOCK_EX
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                for t in taken:
                    fcntl.flock(t, fcntl.LOCK_UN)
                return False
            taken.append(fd)
        return True

    def _acquire(self, fds: list[int], shared: bool) -> float:
        start = time.monotonic()
        reminded = -REMIND_S
        while True:
            if self._take(fds, shared):
                return time.monotonic() - start
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
