"""Cores of this host, held one measurement at a time: how two Ray nodes on one machine
measure side by side without measuring each other.

A repetition on a Ray node holds, exclusively, as many of the host's cores as its cell
has threads (one flock file per core, beside the machine lock), and its worker is pinned
to them (sched_setaffinity). It also holds the machine lock *shared*: the local executor
holds that lock exclusively, so a local run still has the whole machine to itself, and
any number of pinned repetitions on distinct cores run beside each other. The kernel
drops a flock when its holder dies, so a lost node never leaves cores locked.

With `share=True` (--ray-share-cores) a repetition takes no core and is not pinned: the
user asked for measurements to share cores, and the disturbance check will say so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from stackcost.execute.machine_lock import DEFAULT_PATH, POLL_S, core_lock_path, open_lock_file

# Beside the machine lock: the same fixed directory every stackcost process agrees on.
CORE_LOCK_DIR = DEFAULT_PATH.parent


def host_cpus() -> list[int]:
    """The CPUs this process may run on, in order: the ones a repetition can hold."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def pin(cpus: frozenset[int] | None) -> None:
    """Pin the calling thread (in a worker's child before exec: the worker) to `cpus`;
    threads and children it starts later inherit it."""
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)


def pin_threads(pid: int, cpus: frozenset[int]) -> None:
    """Pin every thread of the running process `pid` to `cpus` (sched_setaffinity on a
    pid moves that one thread only). A thread or process that ended meanwhile is skipped."""
    if not hasattr(os, "sched_setaffinity"):
        return
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), cpus)


class CoreLock:
    """`count` of this host's cores, held exclusively for one repetition (all or none, so
    two waiting repetitions never deadlock on half their cores each)."""

    def __init__(
        self,
        count: int,
        share: bool = False,
        who: str = "",
        machine_lock: Path = DEFAULT_PATH,
        directory: Path = CORE_LOCK_DIR,
    ) -> None:
        cpus = host_cpus()
        # A cell wider than the host holds all of it (the local executor runs it so too).
        self.count = min(max(count, 1), len(cpus))
        self.cpus, self.share = cpus, share
        self.who = who or f"pid {os.getpid()}"
        self.machine_lock, self.directory = machine_lock, directory
        self.waited_s = 0.0

    @contextlib.contextmanager
    def held(self) -> Iterator[frozenset[int]]:
        """Hold the cores; yields them (empty when sharing: the worker is not pinned)."""
        start = time.monotonic()
        fds: list[int] = []
        try:
            while True:
                taken = self._try_take()
                if taken is not None:
                    fds, cores = taken
                    break
                time.sleep(POLL_S)
            self.waited_s = time.monotonic() - start
            yield cores
        finally:
            for fd in fds:
                os.close(fd)  # closing drops the flock

    def _try_take(self) -> tuple[list[int], frozenset[int]] | None:
        """The machine lock shared and `count` free cores, or None (nothing held)."""
        machine = open_lock_file(self.machine_lock)
        try:
            fcntl.flock(machine, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # a local run holds the whole machine
            os.close(machine)
            return None
        fds, cores = [machine], []
        if not self.share:
            for cpu in self.cpus:
                fd = open_lock_file(core_lock_path(cpu, self.directory))
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                fds.append(fd)
                cores.append(cpu)
                if len(cores) == self.count:
                    break
            if len(cores) < self.count:
                for fd in fds:
                    os.close(fd)
                return None
        for fd in fds[1:]:
            with contextlib.suppress(OSError):  # a read-only fd cannot say who holds it
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{self.who}\n".encode(), 0)
        return fds, frozenset(cores)
