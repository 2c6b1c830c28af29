"""Warm worker start: fork each repetition's worker from a process that imported torch.

A cold worker spends most of a short repetition starting: 0.7 s to spawn and 2.9 s to
import torch on this 2-core machine, against a timed loop of 0.2-3 s. A warm starter is
started once per worker environment, with exactly the environment a cold worker gets,
imports torch and stackcost's measuring modules, and then forks one child per
repetition. Each child is still its own process: its own memory, threads, crash and
exit, killed with its process group at the timeout as before.

Fork safety: the starter imports but never runs a torch op, so no OpenMP pool exists
to be copied into the child (OpenBLAS, which numpy starts at import, re-creates its
threads after a fork). Other frameworks are imported by the child, as a cold worker
does: ONNX Runtime starts a thread at import, which a fork would not carry over.

Protocol, one JSON line each way: the starter says {"ready": import_s}; the executor
sends {"module", "argv", "log"}; the starter answers {"pid"} at the fork and {"exit"}
(Popen's returncode: negative for a signal) when the child ends.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from typing import IO

from stackcost.execute.cores import pin

# What every worker imports before its measurement starts (execute/worker.py and its
# scenarios, their lazy imports included): imported once, in the starter.
PRELOAD = (
    "torch",
    "stackcost.execute.worker",
    "stackcost.scenarios.registry",
    "stackcost.zoo",
    "stackcost.backends",
    "stackcost.backends.base",
    "stackcost.measure.memory",
    "stackcost.measure.disturbance",
    "stackcost.measure.leak",
    "stackcost.verify",
    "stackcost.workload",
)
# What a worker of a Hugging Face model imports besides (its model's module is lazy and
# cheap): seconds of imports, paid once by the starter that forks such workers, not by each.
PRELOAD_HF = ("transformers", "transformers.modeling_utils")
# A starter imports torch in about 3 s here; a machine swapping may take far longer.
READY_TIMEOUT_S = 300.0


class StarterLost(RuntimeError):
    """The starter died or stopped answering; the repetition fails as crashed, and the
    next one gets a fresh starter."""


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux prctl): a sweep killed with
    SIGKILL must leave no starter or worker measuring on."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the worker's own timeout still bounds it


class ForkedWorker:
    """A child of the starter, waited on like subprocess.Popen (pid, wait, returncode)."""

    def __init__(self, starter: WarmStarter, pid: int) -> None:
        self.starter, self.pid = starter, pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            message = self.starter.answer(timeout)
            if message is None:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            self.returncode = int(message["exit"])
        return self.returncode


class WarmStarter:
    """One starter process for one worker environment."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            [python, "-m", "stackcost.execute.warm_start"],
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            # Its own session: the terminal's Ctrl-C reaches the executor, which stops the
            # worker itself and stores the repetition as interrupted.
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._pending = b""  # answer bytes read but not yet parsed
        try:
            message = self.answer(READY_TIMEOUT_S)
        except StarterLost:
            message = None
        if message is None or "ready" not in message:
            self.close()
            raise StarterLost(f"the warm starter did not start ({message or 'no answer'})")
        self.import_s = float(message["ready"])

    def answer(self, timeout_s: float | None) -> dict | None:
        """The starter's next message; None when `timeout_s` passes first.

        Read from the pipe's descriptor, not through a buffered file: two answers may
        arrive in one read, and select() cannot see what a file object buffered."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise StarterLost("the warm starter exited")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def start(
        self,
        module: str,
        argv: list[str],
        log: str,
        cpus: frozenset[int] | None = None,
        preload: tuple[str, ...] = (),
    ) -> ForkedWorker:
        """Fork a worker running `module` with `argv`, its output in `log`, pinned to
        `cpus` when given (a cluster node's held cores); the starter first imports
        `preload` (PRELOAD_HF), once, for this and every later worker."""
        assert self.proc.stdin is not None
        request = {
            "module": module, "argv": argv, "log": log, "cpus": sorted(cpus or []),
            "preload": list(preload),
        }  # fmt: skip
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:
            raise StarterLost(f"the warm starter exited ({exc})") from exc
        message = self.answer(READY_TIMEOUT_S)
        if message is None or "pid" not in message:
            raise StarterLost(f"the warm starter did not fork ({message or 'no answer'})")
        return ForkedWorker(self, int(message["pid"]))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the starter: EOF on its input ends its loop; a stuck one is killed."""
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


# -- the starter process ------------------------------------------------------------------
def _child(request: dict, answers: IO[str]) -> None:
    """In the forked child: become a cold worker's equal, then run the worker module."""
    try:
        os.setsid()  # its own process group, killed whole at a timeout
        die_with_parent()
        pin(frozenset(request["cpus"]))  # the cores a cluster node holds for it, if any
        answers.close()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import runpy

        sys.argv = [request["module"], *request["argv"]]
        # Run as __main__, as `python -m` does; the preloaded copy stays unused (runpy
        # warns when the module it runs is already imported).
        sys.modules.pop(request["module"], None)
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # a worker that finished exits 0 itself (execute/process.py serve)


def serve() -> None:
    # Answers go over a private copy of stdout; stray prints from imports go to stderr.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    t0 = time.perf_counter()
    for module in PRELOAD:
        importlib.import_module(module)
    answers.write(json.dumps({"ready": time.perf_counter() - t0}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        for module in request.get("preload", ()):
            # A module that fails to import fails again in the worker, which reports it.
            with contextlib.suppress(Exception):
                importlib.import_module(module)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, answers)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")
    # EOF: the executor is done. Exit at once: an interpreter that imported torch takes
    # ~0.85 s here to tear down, which every run's end waited for, and this process holds
    # nothing to flush or free (each worker was its own process, already reaped).
    answers.close()
    os._exit(0)


if __name__ == "__main__":
    serve()
