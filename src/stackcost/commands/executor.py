"""--executor local|ray and --ray-address: where a measuring command's repetitions run."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.api.executors import (
    CONNECT_TIMEOUT_S,
    MAX_CONNECT_TIMEOUT_S,
    Executor,
    ExecutorChoice,
    MachineLock,
    check_executor_kind,
    check_ray_address,
    check_ray_ready,
    open_executor,
)
from stackcost.errors import SpecError
from stackcost.runspec.grammar import parse_float


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
    check_executor_kind(args.executor)
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
        check_ray_address(args.ray_address)
        if args.ray_connect_timeout is not None and args.ray_address is None:
            raise SpecError("--ray-connect-timeout applies with --ray-address")
        connect_timeout(args)
        check_ray_ready(wait=not args.no_wait)


def connect_timeout(args: argparse.Namespace) -> float:
    """--ray-connect-timeout in seconds, or the default when it was not given."""
    if args.ray_connect_timeout is None:
        return CONNECT_TIMEOUT_S
    return parse_float(
        args.ray_connect_timeout,
        "--ray-connect-timeout",
        0.0,
        MAX_CONNECT_TIMEOUT_S,
        high_closed=True,
    )


def executor_choice(args: argparse.Namespace) -> ExecutorChoice:
    """The executor flags (and --no-reuse, --no-wait) as the API's choice; checked first
    (check_executor_args)."""
    return ExecutorChoice(
        kind=args.executor,
        reuse=not args.no_reuse,
        wait=not args.no_wait,
        ray_address=args.ray_address,
        ray_connect_timeout_s=connect_timeout(args),
        ray_share_cores=args.ray_share_cores,
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


def executor_for(
    args: argparse.Namespace,
    lock: Callable[[], MachineLock],
    on_change: Callable[[Any], None] | None = None,
) -> AbstractContextManager[Executor]:
    """The executor the flags ask for; with ray, connected for the block's duration (a
    cluster that does not answer is a SpecError, before any store is opened)."""
    return open_executor(executor_choice(args), lock, on_change)
