"""The local executor: one repetition at a time, each in a fresh process.

Benchmarks need the machine to themselves, so there is no parallelism here. The
interface is `map(tasks) -> iterator of (task, result)`, which a distributed executor
(Ray) can implement by streaming results back as they complete.

Within `map`, workers start warm by default: forked from a starter that imported torch
once per worker environment (execute/warm_start.py). `run(task)` alone, or
`worker_start="cold"`, starts a fresh interpreter per repetition, as before.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from stackcost.env import now
from stackcost.execute.cores import pin
from stackcost.execute.environ import worker_environ
from stackcost.execute.machine_lock import MachineLock
from stackcost.execute.warm_start import (
    PRELOAD_HF,
    ForkedWorker,
    StarterLost,
    WarmStarter,
    die_with_parent,
)
from stackcost.result import RateFigures, RepetitionResult
from stackcost.scenarios import progress
from stackcost.scenarios.task import RepetitionTask

WORKER_STARTS = ("warm", "cold")


# A finished part of a repetition still running (scenarios/progress.py): the task, the
# rate's index in its sweep and its figures. The runner stores it as it lands.
OnProgress = Callable[[RepetitionTask, int, RateFigures], None]
# How often a waiting executor looks for progress.
PROGRESS_EVERY_S = 0.5


class Executor(Protocol):
    # `tasks` yields None when nothing can start before a result in flight is back (a
    # doubling search waiting on its batch): a concurrent executor waits for one; a
    # serial one, pulling only after each result, never sees it. An executor that reads
    # its workers' progress as it lands hands it to `on_progress` where one is set (the
    # local one); one that cannot (Ray's) returns it with the result (kept_rates).
    def map(
        self, tasks: Iterable[RepetitionTask | None]
    ) -> Iterator[tuple[RepetitionTask, RepetitionResult]]: ...


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def failed(
    task: RepetitionTask, started: str, status: str, reason: str, log_path: Path | None = None
) -> RepetitionResult:
    """A repetition its worker did not answer (crashed, hung, interrupted, refused): the
    reason, the worker log's tail (none where no worker started), and the sweep's rates
    it finished before it stopped (its progress file). Every executor's, the paced
    worker's and the runner's."""
    finished = [rate for _, rate in sorted(progress.read_all(task.workdir), key=lambda r: r[0])]
    return RepetitionResult(
        status=status,  # type: ignore[arg-type]
        reason=reason,
        repetition=task.repetition,
        started_at=started,
        finished_at=now(),
        log_tail=_tail(log_path) if log_path else "",
        kept_rates=[*task.kept_rates, *finished],
    )


def preload(task: RepetitionTask) -> tuple[str, ...]:
    """What the warm starter imports before forking this task's worker."""
    return PRELOAD_HF if task.cell.model.is_hf else ()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


class LocalExecutor:
    """`lock` (default: the machine-wide one, waiting) is held around each repetition; the
    worker's environment is built from this process's by execute/environ.py, with
    `extra_env` added on top (one side of an A/B comparison: `--cand-env KEY=VALUE`).
    `python`: the interpreter workers run in (another venv, with stackcost installed)."""

    def __init__(
        self,
        python: str = sys.executable,
        lock: MachineLock | None = None,
        worker_start: str = "warm",
        cpus: frozenset[int] | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        if worker_start not in WORKER_STARTS:
            raise ValueError(f"worker start {worker_start!r}: use {' or '.join(WORKER_STARTS)}")
        self.python = python
        self.lock = lock if lock is not None else MachineLock()
        self.worker_start = worker_start
        self.cpus = cpus  # pin every worker to these (a Ray node's held cores); None: don't
        self.extra_env = dict(extra_env or {})
        self.on_progress: OnProgress | None = None  # set by whoever stores it (the runner)
        # Warm starters by worker environment, open while a map() is (retries nest maps).
        self._starters: dict[tuple[tuple[str, str], ...], WarmStarter] = {}
        self._maps = 0

    def map(
        self, tasks: Iterable[RepetitionTask | None]
    ) -> Iterator[tuple[RepetitionTask, RepetitionResult]]:
        with self.session():
            for task in tasks:
                if task is not None:  # None: a wait, which a serial executor never meets
                    yield task, self.run(task)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Keep warm starters open across maps: an interleaved A/B calls map() once per
        repetition, alternating between two executors, and must not re-import torch."""
        self._maps += 1
        try:
            yield
        finally:
            self._maps -= 1
            if not self._maps:
                for starter in self._starters.values():
                    starter.close()
                self._starters.clear()

    def environ(self, task: RepetitionTask) -> dict[str, str]:
        """The worker's environment for `task`: whitelist, inherited names, threads, extra."""
        return {
            **worker_environ(os.environ, task.thread_env(), task.inherit_env),
            **self.extra_env,
        }

    def run(self, task: RepetitionTask) -> RepetitionResult:
        with self.lock.held():
            result = self._run(task)
        result.host = platform.node()
        return result

    def _run(self, task: RepetitionTask) -> RepetitionResult:
        # The task's files live in its workdir, inside the run's scratch directory, so
        # whatever a killed run leaves is cleaned with that directory (execute/scratch.py).
        tmp = Path(task.workdir) / "worker"
        tmp.mkdir(parents=True, exist_ok=True)
        task_path, result_path, log_path = (tmp / n for n in ("task.json", "result.json", "log"))
        task_path.write_text(task.model_dump_json())
        started = now()
        t0 = time.perf_counter()
        env = self.environ(task)
        argv = [str(task_path), str(result_path)]
        starter = self._starter(env)
        proc: subprocess.Popen | ForkedWorker | None = None
        with log_path.open("wb") as log:
            try:
                proc = (
                    starter.start(task.worker, argv, str(log_path), self.cpus, preload(task))
                    if starter
                    else self._spawn(task.worker, argv, env, log)
                )
                code = self._wait(proc, task, t0)
            except StarterLost as exc:
                self._drop(env)
                return failed(task, started, "crashed", str(exc), log_path)
            except subprocess.TimeoutExpired:
                assert proc is not None
                self._kill(proc)
                return failed(
                    task, started, "timeout", f"no result after {task.timeout_s:g} s", log_path
                )
            except KeyboardInterrupt:
                # The caller stores this and stops: the in-flight repetition is not lost.
                if proc is not None:
                    self._kill(proc)
                return failed(task, started, "interrupted", "interrupted by Ctrl-C", log_path)
        elapsed = time.perf_counter() - t0
        if code < 0:
            name = _signal_name(-code)
            if -code == signal.SIGKILL:
                return failed(
                    task,
                    started,
                    "oom",
                    "killed by SIGKILL (likely the kernel's OOM killer)",
                    log_path,
                )
            return failed(task, started, "crashed", f"worker died on {name}", log_path)
        if not result_path.exists():
            return failed(
                task,
                started,
                "crashed",
                f"worker exited with code {code} and no result",
                log_path,
            )
        result = RepetitionResult.model_validate_json(result_path.read_text())
        if result.phases.total_s is not None:
            result.phases.spawn_s = max(elapsed - result.phases.total_s, 0.0)
        # Spawn and import are outside every reported timing; say which start this was.
        result.details["worker_start"] = (
            {"kind": "warm", "starter_import_s": starter.import_s} if starter else {"kind": "cold"}
        )
        if not result.valid and not result.log_tail:
            result.log_tail = _tail(log_path)
        return result

    def _wait(self, proc: subprocess.Popen | ForkedWorker, task: RepetitionTask, t0: float) -> int:
        """The worker's exit code, handing its progress on as it lands; TimeoutExpired
        after the task's timeout."""
        reader = progress.Reader(task.workdir)
        deadline = t0 + task.timeout_s
        while True:
            step = min(PROGRESS_EVERY_S, max(deadline - time.perf_counter(), 0.0))
            try:
                code = proc.wait(timeout=step)
            except subprocess.TimeoutExpired:
                if time.perf_counter() >= deadline:
                    raise
                code = None
            if self.on_progress is not None:
                for index, rate in reader.new():
                    self.on_progress(task, index, rate)
            if code is not None:
                return code

    def _spawn(self, module: str, argv: list[str], env: dict[str, str], log) -> subprocess.Popen:
        """A cold worker: a fresh interpreter. A new session makes it a process-group
        leader, so a timeout also kills its children (Inductor's compile workers)."""
        return subprocess.Popen(
            [self.python, "-m", module, *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: (die_with_parent(), pin(self.cpus)),
        )

    def _starter(self, env: dict[str, str]) -> WarmStarter | None:
        """The warm starter for this environment (started on first use), or None for a
        cold start: outside map(), with worker_start="cold", or if it cannot start."""
        if self.worker_start != "warm" or not self._maps:
            return None
        key = tuple(sorted(env.items()))
        if key not in self._starters or not self._starters[key].alive():
            try:
                self._starters[key] = WarmStarter(self.python, env)
            except (StarterLost, OSError):
                return None  # the cold path still measures; it is only slower
        return self._starters[key]

    def _drop(self, env: dict[str, str]) -> None:
        starter = self._starters.pop(tuple(sorted(env.items())), None)
        if starter:
            starter.close()

    @staticmethod
    def _kill(proc: subprocess.Popen | ForkedWorker) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
