"""The local executor: one repetition at a time, each in a fresh process.

Benchmarks need the machine to themselves, so there is no parallelism here. The
interface is `map(tasks) -> iterator of (task, result)`, which a distributed executor
(Ray) can implement by streaming results back as they complete.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from stackcost.env import now
from stackcost.execute.environ import worker_environ
from stackcost.execute.machine_lock import MachineLock
from stackcost.execute.task import RepetitionTask
from stackcost.result import RepetitionResult


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL me if the parent dies (Linux prctl).

    A sweep killed with SIGKILL must not leave its worker measuring on, competing with
    the resumed sweep for the machine.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the worker's own timeout still bounds it


class Executor(Protocol):
    def map(
        self, tasks: Iterable[RepetitionTask]
    ) -> Iterator[tuple[RepetitionTask, RepetitionResult]]: ...


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


class LocalExecutor:
    """`lock` (default: the machine-wide one, waiting) is held around each repetition; the
    worker's environment is built from this process's by execute/environ.py."""

    def __init__(self, python: str = sys.executable, lock: MachineLock | None = None) -> None:
        self.python = python
        self.lock = lock if lock is not None else MachineLock()

    def map(
        self, tasks: Iterable[RepetitionTask]
    ) -> Iterator[tuple[RepetitionTask, RepetitionResult]]:
        for task in tasks:
            yield task, self.run(task)

    def run(self, task: RepetitionTask) -> RepetitionResult:
        with self.lock.held():
            return self._run(task)

    def _run(self, task: RepetitionTask) -> RepetitionResult:
        # The task's files live in its workdir, inside the run's scratch directory, so
        # whatever a killed run leaves is cleaned with that directory (execute/scratch.py).
        tmp = Path(task.workdir) / "worker"
        tmp.mkdir(parents=True, exist_ok=True)
        task_path, result_path, log_path = (tmp / n for n in ("task.json", "result.json", "log"))
        task_path.write_text(task.model_dump_json())
        started = now()
        t0 = time.perf_counter()
        with log_path.open("wb") as log:
            # A new session makes the worker a process-group leader, so a timeout
            # also kills its children (Inductor's compile workers, for instance).
            proc = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    task.worker,
                    str(task_path),
                    str(result_path),
                ],
                env=worker_environ(os.environ, task.thread_env(), task.inherit_env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            try:
                code = proc.wait(timeout=task.timeout_s)
            except subprocess.TimeoutExpired:
                self._kill(proc)
                return self._fail(
                    task, started, "timeout", f"no result after {task.timeout_s:g} s", log_path
                )
            except KeyboardInterrupt:
                # The caller stores this and stops: the in-flight repetition is not lost.
                self._kill(proc)
                return self._fail(task, started, "interrupted", "interrupted by Ctrl-C", log_path)
        elapsed = time.perf_counter() - t0
        if code < 0:
            name = _signal_name(-code)
            if -code == signal.SIGKILL:
                return self._fail(
                    task,
                    started,
                    "oom",
                    "killed by SIGKILL (likely the kernel's OOM killer)",
                    log_path,
                )
            return self._fail(task, started, "crashed", f"worker died on {name}", log_path)
        if not result_path.exists():
            return self._fail(
                task,
                started,
                "crashed",
                f"worker exited with code {code} and no result",
                log_path,
            )
        result = RepetitionResult.model_validate_json(result_path.read_text())
        if result.phases.total_s is not None:
            result.phases.spawn_s = max(elapsed - result.phases.total_s, 0.0)
        if not result.valid and not result.log_tail:
            result.log_tail = _tail(log_path)
        return result

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    @staticmethod
    def _fail(
        task: RepetitionTask, started: str, status: str, reason: str, log_path: Path
    ) -> RepetitionResult:
        return RepetitionResult(
            status=status,  # type: ignore[arg-type]
            reason=reason,
            repetition=task.repetition,
            started_at=started,
            finished_at=now(),
            log_tail=_tail(log_path),
        )
