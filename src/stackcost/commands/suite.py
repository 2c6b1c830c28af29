"""`stackcost suite [NAME|FILE]`: a TorchBench-style suite, resumable, and its summary.

Each model of the suite is one run (see spec/suite.py for why), executed by the
engine with resume: running the same suite again (with the same --backends and
--precisions) continues every model where it stopped; --force measures everything again
in new runs. --summary-only re-renders the summary from the store without measuring:
each entry's latest stored run, found by its stored spec (report/frames/suite.py), wherever
it ran.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.api.grid import check_db, check_policy, gate_problem, prepare
from stackcost.api.suites import stored_runs
from stackcost.axes import DEVICES, PRECISIONS
from stackcost.commands.executor import check_executor_args
from stackcost.commands.run import add_session_args, import_timeout, open_session
from stackcost.errors import SpecError
from stackcost.runspec.grammar import split_list


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "suite",
        help="run a named benchmark suite (one model per domain) and summarize it vs eager",
    )
    p.add_argument(
        "suite",
        nargs="?",
        default="default",
        help="suite name (default: examples/suite.yaml; NAME: examples/suite-NAME.yaml) "
        "or a YAML file",
    )
    p.add_argument("--db", default="stackcost.db", help="SQLite store (default ./stackcost.db)")
    p.add_argument("--backends", help="comma list replacing the suite's (eager is always run)")
    p.add_argument(
        "--precisions",
        help=f"comma list of {', '.join(PRECISIONS)}, replacing the suite's (default fp32); "
        "fp32 is run beside a quantized one: the summary gives each rung's speedup over it",
    )
    p.add_argument(
        "--device",
        help=f"{' or '.join(DEVICES)}, replacing the suite's (default: its device:, else cpu)",
    )
    p.add_argument(
        "--summary-only",
        action="store_true",
        help="measure nothing: summarize the suite's stored runs (each model's latest, "
        "on whichever machine)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="measure everything again in new runs instead of resuming",
    )
    p.add_argument("--quiet", action="store_true", help="no live progress")
    add_session_args(p)


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.runspec.suite import load_suite

    backends = None
    if args.backends is not None:
        backends = split_list(args.backends, "--backends", "eager,onnxruntime")
    precisions = None
    if args.precisions is not None:  # each value checked with the suite (load_suite)
        precisions = split_list(args.precisions, "--precisions", "fp32,int8")
    if args.summary_only and args.force:
        raise SpecError("--summary-only measures nothing: --force does not apply")
    check_policy(args.on_disturbed)
    check_executor_args(args)
    if not args.summary_only:
        check_db(args.db)
    # Every check before the store is touched; a summary is a view: nothing of this machine.
    suite = load_suite(
        args.suite, backends, precisions, device=args.device, for_viewing=args.summary_only
    )
    if args.summary_only:
        return _summary_only(suite, args, console)
    return _measure(suite, args, console)


def _summary_only(suite: Any, args: argparse.Namespace, console: Console) -> int:
    from stackcost.report.frames.suite import summarize
    from stackcost.report.terminal.suite import summary_renderables

    found = stored_runs(suite, args.db)
    if not found.runs:
        print(
            f"stackcost: no stored run of suite {suite.name} in {args.db} with these models, "
            f"backends and precisions (run `stackcost suite {args.suite} --db {args.db}` "
            "with the same flags first)",
            file=sys.stderr,
        )
        return 1
    console.print(summary_renderables(summarize(found.runs, suite.name, found.expected)))
    ids = " ".join(r.run_id for r in found.runs)
    console.print(Text(f"from {len(found.runs)} stored runs in {args.db}: {ids}"))
    return 0


def _measure(suite: Any, args: argparse.Namespace, console: Console) -> int:
    from stackcost.report.frames.suite import summarize
    from stackcost.report.terminal.progress import LiveProgress
    from stackcost.report.terminal.suite import summary_renderables
    from stackcost.runspec.suite import Expected, workload_label_of_spec

    # User code asked once per model, every entry before the lock and the store.
    prepared = [prepare(spec, import_timeout_s=import_timeout(args)) for spec in suite.specs]
    err = Console(stderr=True)
    # With the workloads learned: an entry that leaves a size out gets the model's default.
    labels = [workload_label_of_spec(p.spec) for p in prepared]
    expected = [Expected(label, p) for label in labels for p in suite.precisions]
    progress = LiveProgress(err, enabled=not args.quiet)

    def opened(entry: int, run_id: str, resumed: bool, stored: int) -> None:
        if resumed and not args.quiet:
            err.print(
                Text(
                    f"{labels[entry]}: resuming run {run_id}: {stored} repetitions already "
                    "stored (--force measures everything again)",
                    style="dim",
                )
            )

    # The progress display starts once the executor and the store are open.
    with open_session(args, err, progress) as measuring, progress:
        results = measuring.measure_suite(
            prepared,
            resume=not args.force,
            on_start=progress.start,
            on_result=progress.result,
            on_open=opened,
        )
    console.print(summary_renderables(summarize(results, suite.name, expected)))
    ids = " ".join(r.run_id for r in results)
    console.print(Text.assemble(f"stored {len(results)} runs in {args.db}: ", (ids, "bold")))
    return _exit_code(results)


def _exit_code(results: list[Any]) -> int:
    """1 when the suite stopped early (--on-disturbed fail) or nothing was measured cleanly.
    A backend failing on a model is a result of the suite, listed in the summary: it does
    not fail the command (unlike `stackcost run`, where the user asked for that cell)."""
    if problem := gate_problem(results, first_reason=False):
        print(f"stackcost: {problem}", file=sys.stderr)
        return 1
    return 0
