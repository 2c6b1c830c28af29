"""--executor local|ray and --ray-address: where a measuring command's repetitions run."""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.errors import SpecError
from stackcost.execute.local import Executor, LocalExecutor
from stackcost.execute.machine_lock import MachineLock
from stackcost.execute.ray_executor import CONNECT_TIMEOUT_S  # Ray is imported on connecting
from stackcost.runspec.grammar import parse_float

EXECUTORS = ("local", "ray")
HOST_PORT = re.compile(r"[A-Za-z0-9.\-\[\]:]+:\d{1,5}")


def add_executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--executor",
        default="local",
        help="local (default: one repetition at a time, this machine to itself) or ray "
        "(repetitions as Ray tasks, each holding its cell's cores on its node)",
    )
    p.add_argument(
        "--ray-address",
        metavar="auto|HOST:PORT",
        help="the Ray cluster to use with --executor ray (default: start one here)",
    )
    p.add_argument(
        "--ray-connect-timeout",
        metavar="SECONDS",
        help=f"with --ray-address: how long the cluster may take to answer before it is "
        f"called unreachable (default {CONNECT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--ray-share-cores",
        action="store_true",
        help="with --executor ray: no core locks or pinning, so nodes declared with more "
        "CPUs than they have measure side by side (the disturbance check will show it)",
    )


def check_executor_args(args: argparse.Namespace) -> None:
    """Bad --executor input, refused before anything is written (SpecError: exit 2)."""
    if args.executor not in EXECUTORS:
        raise SpecError(
            f"--executor {args.executor!r} is not an executor (allowed: {', '.join(EXECUTORS)})"
        )
    ray_only = [
        flag
        for flag, given in (
            ("--ray-address", args.ray_address),
            ("--ray-connect-timeout", args.ray_connect_timeout),
            ("--ray-share-cores", args.ray_share_cores),
        )
        if given
    ]
    if args.executor != "ray" and ray_only:
        raise SpecError(f"{ray_only[0]} applies to --executor ray only")
    if args.executor == "ray":
        address = args.ray_address
        if address is not None and address != "auto" and not HOST_PORT.fullmatch(address):
            raise SpecError(
                f"--ray-address {address!r} is not auto or HOST:PORT (e.g. 10.0.0.5:6379)"
            )
        if args.ray_connect_timeout is not None and address is None:
            raise SpecError("--ray-connect-timeout applies with --ray-address")
        connect_timeout(args)
        if args.no_wait:
            raise SpecError(
                "--no-wait applies to --executor local (a Ray repetition waits for its cores on its node)"
            )
        try:
            import ray  # noqa: F401
        except ImportError:
            raise SpecError("--executor ray needs Ray: pip install 'stackcost[ray]'") from None


def connect_timeout(args: argparse.Namespace) -> float:
    """--ray-connect-timeout in seconds, or the default when it was not given."""
    if args.ray_connect_timeout is None:
        return CONNECT_TIMEOUT_S
    return parse_float(
        args.ray_connect_timeout, "--ray-connect-timeout", 0.0, 3600.0, high_closed=True
    )


def cluster_line(progress: Any, err: Console) -> Callable[[Any], None]:
    """The progress bar's description becomes the cluster line (nodes, running, queued);
    a change in the number of nodes is also printed, so a lost node is on record."""
    seen: list[int] = []

    def show(view: Any) -> None:
        progress.progress.update(progress.task, description=view.line())
        if seen and seen[-1] != view.nodes:
            err.print(Text(f"{view.line()} (was {seen[-1]} nodes)", style="yellow"))
        seen[:] = [view.nodes]

    return show


@contextlib.contextmanager
def executor_for(
    args: argparse.Namespace,
    lock: Callable[[], MachineLock],
    on_change: Callable[[Any], None] | None = None,
) -> Iterator[Executor]:
    """The executor the flags ask for; with ray, connected for the block's duration (a
    cluster that does not answer is a SpecError, before any store is opened)."""
    if args.executor == "local":
        yield LocalExecutor(lock=lock(), worker_start="cold" if args.no_reuse else "warm")
        return
    from stackcost.execute.ray_executor import RayExecutor, connected

    address = args.ray_address
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(connected(address, connect_timeout(args)))
        except (ConnectionError, RuntimeError) as exc:
            where = f"at {address}" if address else "started here"
            raise SpecError(f"--executor ray: no Ray cluster {where}: {exc}") from None
        yield RayExecutor(share_cores=args.ray_share_cores, on_change=on_change)
