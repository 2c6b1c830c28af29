"""A worker whose timed loop the parent paces in bursts: the parent's half of `ab`'s
burst design (the worker's half is measure/bursts.py).

It is started as a repetition's worker is, from the side's interpreter and environment,
and runs the same preamble: the model built, the backend prepared, the cold call and the
warmup. Then it serves bursts of steps on command until told to stop, and writes its
repetition's result (every burst's samples, its verification) as any worker does. One
worker is one repetition of the cell, stored in the side's run.

The worker is a fresh interpreter (a cold start), so each block draws its own process
layout: the per-process bias that only more processes average away (issue 40).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stackcost.env import now
from stackcost.execute.cores import pin_threads
from stackcost.execute.local import failed
from stackcost.execute.warm_start import die_with_parent
from stackcost.result import RepetitionResult
from stackcost.scenarios.task import RepetitionTask

# From the start to the first ready: imports, the model, the export or compile, warmup.
READY_TIMEOUT_S = 600.0
# One burst is tens of milliseconds; a step that hangs is killed after this.
BURST_TIMEOUT_S = 120.0


class Refused(Exception):
    """The cell cannot be cut into bursts (its program runs the whole repetition)."""


class BurstChannel:
    """A child that serves bursts over measure/bursts.py's protocol: commands on its
    stdin, replies on a pipe whose write end it is passed. `argv(fd)` is its command line
    given that end's descriptor; its output goes to `log_path`. PacedWorker is a
    repetition's worker on this channel; a peer harness (benchmarks/agreement.py) is
    another."""

    def __init__(
        self, argv: Callable[[int], list[str]], env: dict[str, str], log_path: Path
    ) -> None:
        self.log_path = log_path
        read_end, write_end = os.pipe()
        self.started_at = now()
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv(write_end),
                env=env,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                start_new_session=True,  # a kill reaches its children too
                preexec_fn=die_with_parent,
                text=True,
            )
        os.close(write_end)
        self._replies = os.fdopen(read_end)

    def _reply(self, timeout_s: float) -> dict[str, Any] | None:
        """The worker's next line, or None: it closed the channel (ended) or timed out."""
        ready, _, _ = select.select([self._replies], [], [], timeout_s)
        if not ready:
            return None
        line = self._replies.readline()
        return json.loads(line) if line else None

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def ready(self, timeout_s: float = READY_TIMEOUT_S) -> float | None:
        """The worker's step time (ns) once it is warm; None when it ended before that
        (its result says why). Refused when the cell cannot be paced."""
        reply = self._reply(timeout_s)
        if reply is not None and "refused" in reply:
            raise Refused(reply["refused"])
        return float(reply["ready"]) if reply else None

    def burst(self, steps: int, timeout_s: float = BURST_TIMEOUT_S) -> dict[str, Any] | None:
        """Time `steps` steps: {"ns", "disturbed", "others_cores"}; None if the worker died."""
        try:
            self._send({"burst": steps})
        except (BrokenPipeError, OSError):
            return None
        return self._reply(timeout_s)

    def pin(self, cpus: frozenset[int]) -> None:
        """Move the running child's every thread to `cpus` (threads it starts later
        inherit the mask): a block's workers once both are warm, having started beside
        each other on every core."""
        pin_threads(self.proc.pid, cpus)

    def stop(self) -> None:
        """Tell the child the bursts are over (it then writes its result and exits)."""
        with contextlib.suppress(BrokenPipeError, OSError):
            self._send({"stop": True})
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def kill(self) -> None:
        """End the worker without a result: it measured nothing worth keeping."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        with contextlib.suppress(OSError):
            self._replies.close()


class PacedWorker(BurstChannel):
    """One side's worker for one block: start, ready, bursts, finish."""

    def __init__(self, python: str, env: dict[str, str], task: RepetitionTask) -> None:
        tmp = Path(task.workdir) / "worker"
        tmp.mkdir(parents=True, exist_ok=True)
        self.task_path, self.result_path = tmp / "task.json", tmp / "result.json"

        def argv(fd: int) -> list[str]:
            self.task = task.model_copy(update={"paced_fd": fd})
            self.task_path.write_text(self.task.model_dump_json())
            return [python, "-m", task.worker, str(self.task_path), str(self.result_path)]

        super().__init__(argv, env, tmp / "log")

    def finish(self, timeout_s: float = BURST_TIMEOUT_S) -> RepetitionResult:
        """Stop the bursts and take the worker's result (or its failure as the result)."""
        self.stop()
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self._failed("timeout", f"no result {timeout_s:g} s after the last burst")
        finally:
            self._replies.close()
        if self.result_path.exists():
            return RepetitionResult.model_validate_json(self.result_path.read_text())
        if code < 0:
            return self._failed("crashed", f"worker died on {signal.Signals(-code).name}")
        return self._failed("crashed", f"worker exited with code {code} and no result")

    def _failed(self, status: str, reason: str) -> RepetitionResult:
        return failed(self.task, self.started_at, status, reason, self.log_path)


__all__ = ["BurstChannel", "PacedWorker", "Refused"]
