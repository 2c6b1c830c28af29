"""The Ray executor: each repetition a Ray task, anywhere on a cluster, results streamed
back as they finish.

A repetition's task asks Ray for as many CPUs as its cell has threads (and a GPU for a
cuda cell), so Ray never places two measurements on more CPUs than a node declares; on
the node it holds those cores (execute/cores.py), pins its worker to them, and runs the
same worker process as the local executor. The driver keeps about the cluster's CPUs in
flight, pulling repetitions from the plan only as fast as they can start, and the runner
commits each result the moment it arrives.

A node that dies mid-repetition: Ray's own retries are off (max_retries=0) and this
executor submits the repetition again itself, so the lost try is known; it is recorded
on the stored result (`lost_attempts`: node, error). After MAX_LOST lost tries the
repetition is stored as crashed (or oom, when Ray's memory monitor killed it).

Environments: the run is the driver's (resume keys on the driver's fingerprint, as with
the local executor); each result records its node, and that node's own environment
fingerprint, measured once per node by a zero-CPU task placed on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from stackcost.env import now
from stackcost.execute.cores import CoreLock
from stackcost.execute.local import LocalExecutor
from stackcost.measure.disturbance import wait_for_quiet
from stackcost.result import LostAttempt, Node, RepetitionResult
from stackcost.scenarios.task import RepetitionTask

# Tries a repetition may lose to dead nodes (or killed Ray workers) before it is stored
# as crashed: a repetition that kills its node each time must not loop for ever.
MAX_LOST = 3
# Ray's NodeDiedError names the node in its text (it has no attribute for it).
NODE_IN_ERROR = re.compile(r"node ID: ([0-9a-f]+)")


def run_repetition(task: RepetitionTask, share_cores: bool, quiet_first: bool) -> RepetitionResult:
    """On the node: hold the cell's cores, run the local executor's worker pinned to them."""
    import ray

    who = f"pid {os.getpid()}: ray repetition {task.cell.label()} #{task.repetition}"
    lock = CoreLock(task.cell.threads, share=share_cores, who=who[:300])
    with lock.held() as cores:
        if quiet_first:  # a retry of a disturbed repetition: wait for quiet on its cores
            wait_for_quiet(cpus=cores or None)
        # Outside map() the local executor starts a cold worker, pinned to `cores`.
        result = LocalExecutor(cpus=cores or None)._run(task)
    # The driver removes the workdir too, but on its own host only.
    shutil.rmtree(task.workdir, ignore_errors=True)
    result.host = platform.node()
    result.node = Node(
        node_id=ray.get_runtime_context().get_node_id(),
        cores=sorted(cores),
        waited_s=round(lock.waited_s, 3),
    )
    return result


def node_fingerprint() -> str:
    """On a node: its environment's fingerprint (stackcost.env), as a run's is taken."""
    from stackcost.env import collect, fingerprint

    return fingerprint(collect())


@dataclass(frozen=True)
class ClusterView:
    """What the progress line shows. `running` is estimated: in-flight repetitions, in
    submission order, that fit in the CPUs Ray reports in use; the rest wait for CPUs."""

    nodes: int
    cpus: float
    running: int
    queued: int

    def line(self) -> str:
        return (
            f"ray: {self.nodes} node{'s' * (self.nodes != 1)}, {self.cpus:g} CPUs, "
            f"{self.running} running, {self.queued} queued"
        )


@dataclass
class _Flight:
    """One repetition on its way: its task, what it asks Ray for, the tries it lost."""

    task: RepetitionTask
    cpus: float
    gpus: int
    lost: list[LostAttempt] = field(default_factory=list)


class RayExecutor:
    """Runs repetitions on the Ray cluster this process is connected to (see connected).

    `share_cores` (--ray-share-cores): repetitions take no core lock and are not pinned,
    so a node declared with more CPUs than it has (`ray start --num-cpus N`) runs that
    many measurements on shared cores; their disturbance check will show it.
    `on_change` is called with the cluster's state whenever the executor looks at it.
    """

    def __init__(
        self,
        share_cores: bool = False,
        on_change: Callable[[ClusterView], None] | None = None,
    ) -> None:
        import ray

        self.ray = ray
        self.share_cores, self.on_change = share_cores, on_change
        # Ray's retries off: a lost try must be seen here to be recorded.
        self._repetition = ray.remote(max_retries=0)(run_repetition)
        self._fingerprint_task = ray.remote(num_cpus=0, max_retries=0)(node_fingerprint)
        self.fingerprints: dict[str, str | None] = {}
        self.hosts: dict[str, str] = {}  # node id -> hostname, kept after a node dies
        self._quiet_next = False

    # -- the Executor protocol -------------------------------------------------------
    def map(
        self, tasks: Iterable[RepetitionTask | None]
    ) -> Iterator[tuple[RepetitionTask, RepetitionResult]]:
        source = iter(tasks)
        pending: dict[Any, _Flight] = {}
        exhausted = False
        try:
            while True:
                capacity, widest = self._capacity()
                waiting = False
                while not (exhausted or waiting) and (
                    not pending or sum(f.cpus for f in pending.values()) < capacity
                ):
                    task = next(source, StopIteration)
                    if task is StopIteration:
                        exhausted = True
                    elif task is None:
                        waiting = True  # the plan needs a result first
                    else:
                        assert isinstance(task, RepetitionTask)
                        flight = self._flight(task, widest)
                        pending[self._submit(flight)] = flight
                self._show(pending)
                if not pending:
                    if exhausted:
                        return
                    raise RuntimeError("the plan waits for a result, but none is in flight")
                (ref,), _ = self.ray.wait(list(pending), num_returns=1)
                flight = pending.pop(ref)
                result = self._outcome(ref, flight)
                if result is None:  # lost with its node: run it again
                    pending[self._submit(flight)] = flight
                    continue
                yield flight.task, result
        except KeyboardInterrupt:
            if pending:  # the caller stores it and stops: a resume runs it again
                flight = next(iter(pending.values()))
                yield flight.task, _interrupted(flight.task)
        finally:
            for ref in pending:
                with contextlib.suppress(Exception):
                    self.ray.cancel(ref, force=True)

    def wait_for_quiet(self) -> None:
        """Before a disturbed repetition's retry: the retry waits on its node's cores
        (this driver's machine says nothing about the node's)."""
        self._quiet_next = True

    # -- the cluster -----------------------------------------------------------------
    def _alive(self) -> list[dict[str, Any]]:
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        for n in nodes:
            self.hosts[n["NodeID"]] = n.get("NodeManagerHostname", "")
        return nodes

    def _capacity(self) -> tuple[float, float]:
        """(CPUs of the live nodes, CPUs of the widest one)."""
        cpus = [n.get("Resources", {}).get("CPU", 0.0) for n in self._alive()]
        return sum(cpus), max(cpus, default=0.0)

    def _flight(self, task: RepetitionTask, widest: float) -> _Flight:
        # A cell wider than every node takes a whole node (Ray would never place it).
        cpus = float(min(task.cell.threads, widest)) if widest else float(task.cell.threads)
        return _Flight(task, cpus, 1 if task.cell.device == "cuda" else 0)

    def _submit(self, flight: _Flight) -> Any:
        quiet, self._quiet_next = self._quiet_next, False
        return self._repetition.options(num_cpus=flight.cpus, num_gpus=flight.gpus).remote(
            flight.task, self.share_cores, quiet
        )

    def _show(self, pending: dict[Any, _Flight]) -> None:
        if self.on_change is None:
            return
        nodes = self._alive()
        total = sum(n.get("Resources", {}).get("CPU", 0.0) for n in nodes)
        used = total - self.ray.available_resources().get("CPU", 0.0)
        running, held = 0, 0.0
        for flight in pending.values():
            if held + flight.cpus > used + 1e-9:
                break
            running, held = running + 1, held + flight.cpus
        self.on_change(ClusterView(len(nodes), total, running, len(pending) - running))

    def _outcome(self, ref: Any, flight: _Flight) -> RepetitionResult | None:
        """The repetition's result, or None when its try was lost and it runs again."""
        errors = self.ray.exceptions
        try:
            result: RepetitionResult = self.ray.get(ref)
        except errors.RayTaskError as exc:  # run_repetition itself raised on the node
            result = _failed(flight.task, "failed", f"the Ray task failed: {_first_line(exc)}")
        except errors.RayError as exc:  # the node or its Ray worker died under it
            match = NODE_IN_ERROR.search(str(exc))
            node_id = match.group(1) if match else None
            flight.lost.append(
                LostAttempt(
                    node_id=node_id,
                    host=self.hosts.get(node_id or ""),
                    error=f"{type(exc).__name__}: {_first_line(exc)}",
                    at=now(),
                )
            )
            if len(flight.lost) <= MAX_LOST:
                return None
            oom = isinstance(exc, errors.OutOfMemoryError)
            result = _failed(
                flight.task,
                "oom" if oom else "crashed",
                f"lost {len(flight.lost)} times on the cluster; last: {flight.lost[-1].error}",
            )
        result.lost_attempts = [*flight.lost, *result.lost_attempts]
        if result.node is not None:
            result.node.env_fingerprint = self._fingerprint(result.node.node_id)
        return result

    def _fingerprint(self, node_id: str) -> str | None:
        """The node's environment fingerprint, measured on it the first time it is seen."""
        if node_id not in self.fingerprints:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            on_node = NodeAffinitySchedulingStrategy(node_id, soft=False)
            ref = self._fingerprint_task.options(scheduling_strategy=on_node).remote()
            try:
                self.fingerprints[node_id] = self.ray.get(ref, timeout=120)
            except (self.ray.exceptions.RayError, TimeoutError):
                self.fingerprints[node_id] = None  # the node left meanwhile
        return self.fingerprints[node_id]


def _first_line(exc: BaseException) -> str:
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _failed(task: RepetitionTask, status: str, reason: str) -> RepetitionResult:
    return RepetitionResult(
        status=status,  # type: ignore[arg-type]
        reason=reason,
        repetition=task.repetition,
        started_at=now(),
        finished_at=now(),
    )


def _interrupted(task: RepetitionTask) -> RepetitionResult:
    return _failed(task, "interrupted", "interrupted by Ctrl-C")


# How long connecting to a cluster may take before it is called unreachable.
CONNECT_TIMEOUT_S = 30.0


@contextlib.contextmanager
def connected(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[None]:
    """Connected to the cluster at `address` ("auto" or HOST:PORT) or, with None, to a Ray
    instance started here; left as found when this process was already connected.
    ConnectionError when a cluster does not answer within `timeout_s`."""
    import ray

    if ray.is_initialized():
        yield
        return
    if address is None:
        # "local": a new instance even where ray_current_cluster names an old (maybe dead) one.
        ray.init(address="local", logging_level=logging.WARNING, log_to_driver=False)
    else:
        _join(ray, address, timeout_s)
    try:
        yield
    finally:
        ray.shutdown()


def _join(ray: Any, address: str, timeout_s: float) -> None:
    """ray.init(address), bounded. Ray retries an address that does not answer for minutes,
    in C++ that no signal interrupts, printing a warning a second. So: a plain TCP connect
    first (a refused or unrouted address fails at once), then one throwaway child that
    connects and leaves, killed at the deadline (and with this process), its warnings
    kept off the terminal; only then this process connects."""
    import socket
    import subprocess
    import sys
    import time

    deadline = time.monotonic() + timeout_s
    if address != "auto":
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise ConnectionError(f"nothing answers there within {timeout_s:g} s ({why})") from None
    try:
        tried = subprocess.run(
            [sys.executable, "-c", _TRY_CONNECT, address],
            capture_output=True,
            text=True,
            timeout=max(deadline - time.monotonic(), 0.1),
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
    except subprocess.TimeoutExpired:
        raise ConnectionError(
            f"it did not answer as a Ray cluster within {timeout_s:g} s"
        ) from None
    if tried.returncode != 0:
        lines = [line for line in tried.stderr.splitlines() if "Error" in line] or [""]
        raise ConnectionError(lines[-1].strip() or f"connecting exited with {tried.returncode}")
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)


_TRY_CONNECT = (
    "import logging, sys, ray\n"
    "ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)\n"
    "ray.shutdown()\n"
)


def _die_with_parent() -> None:
    """In the child, before exec: killed when stackcost is (Linux's PR_SET_PDEATHSIG), so
    a SIGTERM to stackcost leaves no connection attempt retrying behind it."""
    import ctypes
    import signal

    with contextlib.suppress(AttributeError, OSError):  # not Linux: it ends at its timeout
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
