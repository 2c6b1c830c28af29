"""Where a measurement's repetitions run: on this machine, one at a time under the machine
lock (`local`), or as tasks on a Ray cluster (`ray`), each holding its cell's cores on
its node.

`ExecutorChoice` says which; `check_executor` refuses a choice that cannot run here before
anything is written, and `open_executor` opens it for a block: the machine lock taken, or
the cluster connected.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from stackcost.errors import SpecError
from stackcost.execute.local import Executor, LocalExecutor
from stackcost.execute.machine_lock import MachineBusy, MachineLock
from stackcost.execute.ray_executor import CONNECT_TIMEOUT_S  # Ray is imported on connecting
from stackcost.runspec.grammar import parse_float

__all__ = [
    "CONNECT_TIMEOUT_S",
    "EXECUTORS",
    "Executor",
    "ExecutorChoice",
    "MAX_CONNECT_TIMEOUT_S",
    "MachineBusy",
    "MachineLock",
    "check_executor",
    "check_executor_kind",
    "check_ray_address",
    "check_ray_ready",
    "machine_lock",
    "open_executor",
]

EXECUTORS = ("local", "ray")
HOST_PORT = re.compile(r"[A-Za-z0-9.\-\[\]:]+:\d{1,5}")
# The most a cluster may be given to answer (the flag's bound).
MAX_CONNECT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class ExecutorChoice:
    """Which executor runs the repetitions, and how.

    Attributes:
        kind: "local" (one repetition at a time, this machine to itself) or "ray".
        reuse: warm workers and shared artifacts per cell; False starts every repetition
            in a fresh interpreter that exports or compiles its own (same numbers, slower).
        wait: local only: queue behind another stackcost measuring here; False refuses
            with MachineBusy instead.
        ray_address: the cluster, "auto" or "HOST:PORT"; None starts one here.
        ray_connect_timeout_s: how long the cluster may take to answer.
        ray_share_cores: no core locks or pinning, so nodes declared with more CPUs than
            they have measure side by side (the disturbance check shows it).
        keep_artifacts: with reuse, the directory the cells' exported and compiled
            artifacts are filed in and kept after the run (default: the run's scratch
            directory, removed when it ends).
    """

    kind: str = "local"
    reuse: bool = True
    wait: bool = True
    ray_address: str | None = None
    ray_connect_timeout_s: float = CONNECT_TIMEOUT_S
    ray_share_cores: bool = False
    keep_artifacts: str | None = None


def check_executor_kind(kind: str) -> None:
    """Refuse (SpecError) a kind that is not one of EXECUTORS."""
    if kind not in EXECUTORS:
        raise SpecError(f"--executor {kind!r} is not an executor (allowed: {', '.join(EXECUTORS)})")


def check_ray_address(address: str | None) -> None:
    """Refuse (SpecError) a cluster address that is neither None, "auto" nor HOST:PORT."""
    if address is not None and address != "auto" and not HOST_PORT.fullmatch(address):
        raise SpecError(f"--ray-address {address!r} is not auto or HOST:PORT (e.g. 10.0.0.5:6379)")


def check_ray_ready(wait: bool) -> None:
    """Refuse (SpecError) Ray where it cannot run: asked not to wait (a Ray repetition
    waits for its cores on its node), or not installed."""
    if not wait:
        raise SpecError(
            "--no-wait applies to --executor local (a Ray repetition waits for its cores on its node)"
        )
    try:
        import ray  # noqa: F401
    except ImportError:
        raise SpecError("--executor ray needs Ray: pip install 'stackcost[ray]'") from None


def check_executor(choice: ExecutorChoice) -> None:
    """Refuse (SpecError) a choice that cannot run here, before anything is written."""
    check_executor_kind(choice.kind)
    if choice.kind == "ray":
        check_ray_address(choice.ray_address)
        parse_float(
            choice.ray_connect_timeout_s,
            "--ray-connect-timeout",
            0.0,
            MAX_CONNECT_TIMEOUT_S,
            high_closed=True,
        )
        check_ray_ready(choice.wait)


def machine_lock(
    *, wait: bool = True, on_wait: Callable[[str], None] | None = None, command: str = ""
) -> MachineLock:
    """This process's turn on the machine, held around each local repetition.

    It queues behind another stackcost that is measuring (`on_wait` gets the line that
    says so), or with `wait=False` refuses at once. `command` is what the lock file shows
    the other process about this one.

    Raises:
        MachineBusy: with `wait=False`, when another stackcost is measuring here.
    """
    who = f"pid {os.getpid()}: {command}"[:300] if command else ""
    lock = MachineLock(wait=wait, on_wait=on_wait, who=who)
    if not wait and (other := lock.busy()):
        raise MachineBusy(f"another stackcost is measuring on this machine ({other})")
    return lock


@contextlib.contextmanager
def open_executor(
    choice: ExecutorChoice,
    lock: Callable[[], MachineLock] | None = None,
    on_change: Callable[[Any], None] | None = None,
) -> Iterator[Executor]:
    """The chosen executor, open for the block.

    Local: under the lock `lock()` returns (default: machine_lock(wait=choice.wait)),
    taken only for a local executor. Ray: connected to the cluster for the block's
    duration; `on_change` gets the cluster's state (nodes, running, queued) whenever the
    executor looks at it.

    Raises:
        SpecError: a cluster that does not answer, before the block runs.
        MachineBusy: see machine_lock.
    """
    if choice.kind == "local":
        held = lock() if lock is not None else machine_lock(wait=choice.wait)
        yield LocalExecutor(lock=held, worker_start="warm" if choice.reuse else "cold")
        return
    from stackcost.execute.ray_executor import RayExecutor, connected

    address = choice.ray_address
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(connected(address, choice.ray_connect_timeout_s))
        except (ConnectionError, RuntimeError) as exc:
            where = f"at {address}" if address else "started here"
            raise SpecError(f"--executor ray: no Ray cluster {where}: {exc}") from None
        yield RayExecutor(share_cores=choice.ray_share_cores, on_change=on_change)
