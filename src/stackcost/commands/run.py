"""`stackcost run MODEL`: one model through backends, a fresh measurement each time."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.api import executors
from stackcost.api.catalog import backend_names
from stackcost.api.grid import (
    IMPORT_TIMEOUT_S,
    Session,
    check_db,
    check_policy,
    gate_problem,
    prepare,
    retry_line,
    session,
)
from stackcost.commands.axes import add_axis_args, axis_fields, number
from stackcost.commands.executor import (
    add_executor_args,
    check_executor_args,
    cluster_line,
    executor_choice,
)
from stackcost.errors import SpecError
from stackcost.runspec.grammar import parse_config, parse_float, parse_positive_ints, parse_shape
from stackcost.runspec.run import model_ref, validate


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="measure one model through backends")
    p.add_argument("model", nargs="?", help="zoo name (see `stackcost list models`)")
    p.add_argument(
        "--model",
        dest="model_opt",
        metavar="MODEL",
        help="zoo name or package.module:factory (a callable returning nn.Module)",
    )
    add_model_args(p)
    add_axis_args(p, defaults=True)
    add_session_args(p)
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the latest run of this same command in this environment in --db: "
        "only the repetitions it lacks, or that were interrupted, run (a serve sweep goes on "
        "from the rates it finished)",
    )


def add_import_timeout_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--import-timeout",
        default=f"{IMPORT_TIMEOUT_S:g}",
        metavar="SECONDS",
        help="how long importing your model or backend code (and transformers, for hf: "
        f"models) may take before it is called a hang (default {IMPORT_TIMEOUT_S:g})",
    )


def import_timeout(args: argparse.Namespace) -> float:
    return parse_float(args.import_timeout, "--import-timeout", 0.0, 3600.0, high_closed=True)


def add_session_args(p: argparse.ArgumentParser) -> None:
    """How a measuring command shares the machine: run, sweep and train."""
    add_import_timeout_arg(p)
    p.add_argument(
        "--on-disturbed",
        default="retry",
        help="a repetition others' processes disturbed: retry (default: 2 more tries once "
        "the machine is quiet, then keep), keep (store it marked), fail (store it, stop)",
    )
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="refuse (exit 75) instead of queueing when another stackcost is measuring here",
    )
    p.add_argument(
        "--no-reuse",
        action="store_true",
        help="every repetition starts a fresh interpreter and exports or compiles its own "
        "artifacts (the slower way before warm workers and the artifact cache; same numbers)",
    )
    add_executor_args(p)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--init", default="torch-default", help="initialization scheme (recorded)")
    p.add_argument("--num-classes", help="classifier width (default: the model's)")
    p.add_argument("--in-channels", help="input channels (default: the model's)")
    p.add_argument("--conv-bias", action="store_true", help="give convolutions a bias")
    p.add_argument("--input-shape", help="per-sample shape for a factory model, e.g. 3,224,224")
    add_hf_args(p, "(default: the model type's)")
    p.add_argument("--seed", default="0", help="seed for weights and inputs (default 0)")


def add_hf_args(p: argparse.ArgumentParser, head_default: str) -> None:
    """-c and --head, the Hugging Face model flags of run, sweep and train."""
    p.add_argument(
        "-c",
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Hugging Face config override, e.g. -c num_hidden_layers=4 (repeatable)",
    )
    p.add_argument(
        "--head",
        help="on a Hugging Face model: base (the bare model) or classification " + head_default,
    )
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load a checkpoint folder's pickle weights (pytorch_model.bin): unpickling runs "
        "code from the file, so only for files you trust (default: refused; safetensors "
        "needs no trust)",
    )


def model_from_args(name: str, args: argparse.Namespace):
    shape = parse_shape(args.input_shape) if args.input_shape else None
    if shape and getattr(args, "size_resolution", None) and ":" in name:
        raise SpecError("--resolution does not apply to a factory model: its --input-shape sets it")
    first = lambda text, what: parse_positive_ints(text, what)[0] if text else None  # noqa: E731
    return model_ref(
        name,
        init=args.init,
        num_classes=first(args.num_classes, "num-classes"),
        in_channels=first(args.in_channels, "in-channels"),
        conv_bias=args.conv_bias,
        input_shape=shape,
        seed=int(number(args.seed, "seed", int, -1)),
        config=parse_config(args.config),
        head=args.head,
        trust_pickle=getattr(args, "trust_pickle", False),
    )


def this_command() -> str:
    return " ".join(["stackcost", *sys.argv[1:]])


def retry_notice(err: Console) -> Callable[[Any, Any, int, int], None]:
    """What the runner's on_retry prints: a disturbed repetition is measured again."""

    def retrying(cell: Any, result: Any, attempt: int, of: int) -> None:
        err.print(Text(retry_line(cell, result, attempt, of), style="yellow"))

    return retrying


def machine_lock(args: argparse.Namespace, err: Console) -> executors.MachineLock:
    """This command's turn on the machine: it queues behind another stackcost that is
    measuring, or with --no-wait refuses (MachineBusy) before any store is touched."""
    return executors.machine_lock(
        wait=not args.no_wait, on_wait=wait_notice(err), command=this_command()
    )


def wait_notice(err: Console) -> Callable[[str], None]:
    """What the machine lock's on_wait prints: this command waits for another stackcost."""
    return lambda line: err.print(Text(line, style="yellow"))


def open_session(
    args: argparse.Namespace, err: Console, progress: Any
) -> AbstractContextManager[Session]:
    """The executor and the store the flags ask for, open for a `with` block; notices go
    to `err`, the cluster's state to `progress`'s bar."""
    return session(
        args.db,
        executor_choice(args),
        command=this_command(),
        on_disturbed=args.on_disturbed,
        on_retry=retry_notice(err),
        on_wait=wait_notice(err),
        on_cluster=cluster_line(progress, err),
    )


def measure_and_show(
    spec: Any,
    args: argparse.Namespace,
    console: Console,
    resume: bool,
    table: Callable[[Any], Any] | None = None,
    make_task: Callable[..., Any] | None = None,
    fresh_hint: str = "--force measures everything again",
) -> int:
    """Check the store, run with live progress, print the table; exit 1 on failed cells.

    Shared by run, sweep and train; `table` and `make_task` are where train differs.
    """
    from stackcost.report.terminal.progress import LiveProgress

    check_policy(args.on_disturbed)
    check_executor_args(args)
    check_db(args.db)
    # User code asked once, before the lock and the store; a spec `train` prepared already
    # comes back as it is.
    prepared = prepare(spec, import_timeout_s=import_timeout(args))
    err = Console(stderr=True)
    progress = LiveProgress(err, enabled=not args.quiet)

    def opened(run_id: str, resumed: bool, stored: int) -> None:
        if resumed:
            err.print(
                Text(f"resuming run {run_id}: {stored} repetitions already stored ({fresh_hint})")
            )

    # The progress display starts once the executor and the store are open.
    with open_session(args, err, progress) as measuring, progress:
        result = measuring.measure(
            prepared,
            resume=resume,
            on_start=progress.start,
            on_result=progress.result,
            on_open=opened,
            make_task=make_task,
        )
    _show(result, args, console, table)
    return _exit_code(result)


def _show(result: Any, args: argparse.Namespace, console: Console, table: Any) -> None:
    """The run's table (serve and generate runs have their own), its profile when it was
    asked for, and where it is stored."""
    from stackcost.report.terminal.profile import profile_table
    from stackcost.report.terminal.run import results_table

    if table is None and any(c.cell.serve is not None for c in result.cells()):
        from stackcost.report.terminal.serve import serve_table

        table = serve_table
    elif table is None and any(c.cell.mode == "generate" for c in result.cells()):
        from stackcost.report.terminal.generate import generate_table

        table = generate_table
    console.print((table or results_table)(result))
    profile = profile_table(result)
    if profile is not None:
        console.print(profile)
    console.print(Text.assemble("stored run ", (result.run_id, "bold"), f" in {args.db}"))


def _exit_code(result: Any) -> int:
    """1 when a cell failed, the run stopped early, or nothing was measured cleanly; the
    last two say why in one line. A CI gate must not pass on a run that measured nothing."""
    if problem := gate_problem([result]):
        print(f"stackcost: {problem}", file=sys.stderr)
        return 1
    return 1 if result.failed else 0


def run(args: argparse.Namespace, console: Console) -> int:
    name = args.model_opt or args.model
    if not name:
        raise SpecError("no model given: stackcost run MODEL (see `stackcost list models`)")
    if args.model_opt and args.model and args.model_opt != args.model:
        raise SpecError(f"two models given ({args.model!r} and {args.model_opt!r}): give one")
    fields = axis_fields(args)
    if fields["backends"] == "all":
        fields["backends"] = backend_names()
    spec = validate({**fields, "models": [model_from_args(name, args)]})
    return measure_and_show(spec, args, console, resume=args.resume)
