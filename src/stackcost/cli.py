"""The `stackcost` command: one small function per subcommand."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from rich.console import Console

from stackcost.spec import (
    SpecError,
    db_problem,
    model_ref,
    parse_choices,
    parse_options,
    parse_positive_ints,
    parse_shape,
    validate,
)


class UsageError(Exception):
    """argparse's complaint, turned into our one-line error."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def build_parser() -> Parser:
    parser = Parser(prog="stackcost", description="Measure what each layer of the DL stack costs.")
    from stackcost import __version__

    parser.add_argument("--version", action="version", version=f"stackcost {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = sub.add_parser("run", help="measure one model through backends")
    run.add_argument("model", nargs="?", help="zoo name (see `stackcost list models`)")
    run.add_argument(
        "--model",
        dest="model_opt",
        metavar="MODEL",
        help="zoo name or package.module:factory (a callable returning nn.Module)",
    )
    run.add_argument(
        "--backends",
        default="all",
        help="comma list, or 'all' for every available backend (default)",
    )
    run.add_argument("--batch-size", default="1", help="comma list, e.g. 1,8 (default 1)")
    run.add_argument("--resolution", help="comma list of input sizes (default: the model's)")
    run.add_argument("--precision", default="fp32", help="comma list of fp32, bf16, fp16")
    run.add_argument(
        "--threads",
        default=str(_cores()),
        help=f"comma list of intra-op thread counts (default {_cores()}, this machine)",
    )
    run.add_argument("--device", default="cpu", help="comma list of cpu, cuda")
    run.add_argument("--mode", default="infer", help="infer (train arrives with `stackcost train`)")
    run.add_argument("--repeats", default="1", help="independent processes per cell (default 1)")
    run.add_argument("--init", default="torch-default", help="initialization scheme (recorded)")
    run.add_argument("--num-classes", type=str, help="classifier width (default: the model's)")
    run.add_argument("--in-channels", type=str, help="input channels (default: the model's)")
    run.add_argument("--conv-bias", action="store_true", help="give convolutions a bias")
    run.add_argument("--input-shape", help="per-sample shape for a factory model, e.g. 3,224,224")
    run.add_argument("--seed", default="0", help="seed for weights and inputs (default 0)")
    run.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="BACKEND.KEY=VALUE",
        help="backend knob, e.g. torchscript.variant=script (repeatable)",
    )
    run.add_argument("--db", default="stackcost.db", help="SQLite store (default ./stackcost.db)")
    run.add_argument("--timeout", default="600", help="seconds per repetition (default 600)")
    run.add_argument("--min-time", default="1.0", help="seconds of timed iterations at least")
    run.add_argument("--max-time", default="20", help="cap on timed seconds; hit => unstable")
    run.add_argument("--target-ci", default="0.02", help="stop when the median's 95%% CI is ±this")
    run.add_argument("--tolerance", help="relative output tolerance, overrides all precisions")
    run.add_argument("--quiet", action="store_true", help="no live progress")

    lst = sub.add_parser("list", help="list models or backends, and why one is unavailable")
    lst.add_argument("what", choices=["models", "backends"])

    sub.add_parser("env", help="print the environment record stored with every run")
    return parser


def _number(text: str, what: str, cast=float, minimum: float = 0.0):
    try:
        value = cast(text)
    except ValueError:
        raise SpecError(f"{what} {text!r} is not a number") from None
    if value <= minimum:
        raise SpecError(f"{what} {text!r} must be greater than {minimum:g}")
    return value


def _run_spec(args: argparse.Namespace) -> dict:
    from stackcost.backends import REGISTRY

    name = args.model_opt or args.model
    if not name:
        raise SpecError("no model given: stackcost run MODEL (see `stackcost list models`)")
    if args.model_opt and args.model and args.model_opt != args.model:
        raise SpecError(f"two models given ({args.model!r} and {args.model_opt!r}): give one")
    shape = parse_shape(args.input_shape) if args.input_shape else None
    if shape and args.resolution:
        raise SpecError("--resolution does not apply to a factory model: its --input-shape sets it")
    ref = model_ref(
        name,
        init=args.init,
        num_classes=parse_positive_ints(args.num_classes, "num-classes")[0]
        if args.num_classes
        else None,
        in_channels=parse_positive_ints(args.in_channels, "in-channels")[0]
        if args.in_channels
        else None,
        conv_bias=args.conv_bias,
        input_shape=shape,
        seed=int(_number(args.seed, "seed", int, -1)),
    )
    backends = (
        list(REGISTRY)
        if args.backends == "all"
        else [b.strip() for b in args.backends.split(",") if b.strip()]
    )
    fields = {
        "models": [ref],
        "backends": backends,
        "modes": parse_choices(args.mode, "mode", ("infer",)),
        "batch_sizes": parse_positive_ints(args.batch_size, "batch size"),
        "resolutions": parse_positive_ints(args.resolution, "resolution")
        if args.resolution
        else None,
        "precisions": parse_choices(args.precision, "precision", ("fp32", "bf16", "fp16")),
        "threads": parse_positive_ints(args.threads, "threads"),
        "devices": parse_choices(args.device, "device", ("cpu", "cuda")),
        "repeats": parse_positive_ints(args.repeats, "repeats")[0],
        "timeout_s": _number(args.timeout, "timeout"),
        "protocol": {
            "min_time_s": _number(args.min_time, "min-time", minimum=-1),
            "max_time_s": _number(args.max_time, "max-time"),
            "target_ci": _number(args.target_ci, "target-ci"),
        },
        "backend_options": parse_options(args.option),
    }
    if args.tolerance:
        tol = _number(args.tolerance, "tolerance")
        fields["tolerance"] = {p: tol for p in ("fp32", "bf16", "fp16")}
    return fields


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.execute.runner import execute
    from stackcost.report.progress import LiveProgress
    from stackcost.report.table import results_table
    from stackcost.store import Store

    spec = validate(_run_spec(args))
    problem = db_problem(args.db)
    if problem:
        raise SpecError(problem)
    # An explicitly requested backend that is unavailable is reported; with 'all',
    # unavailable ones are reported too, so the table says why a rung is missing.
    command = " ".join(["stackcost", *sys.argv[1:]])
    progress = LiveProgress(Console(stderr=True), enabled=not args.quiet)
    with Store(args.db) as store, progress:
        result = execute(
            spec, store, command=command, on_start=progress.start, on_result=progress.result
        )
    console.print(results_table(result))
    console.print(f"stored run [bold]{result.run_id}[/] in {args.db}")
    return 1 if result.failed else 0


def cmd_list(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    table = Table(header_style="bold")
    if args.what == "models":
        from stackcost import zoo

        for col in ("model", "default input", "min res", "classes", "description"):
            table.add_column(col)
        for info in zoo.MODELS.values():
            table.add_row(
                info.name,
                f"{info.default_in_channels}×{info.default_resolution}²",
                str(info.min_resolution),
                str(info.default_num_classes),
                info.description,
            )
        table.caption = (
            f"init schemes: {', '.join(zoo.INIT_SCHEMES)}; or --model package.module:factory"
        )
    else:
        from stackcost.backends import REGISTRY, load_backend

        for col in (
            "backend",
            "available",
            "modes",
            "devices",
            "precisions",
            "description / reason",
        ):
            table.add_column(col)
        for name in REGISTRY:
            b = load_backend(name)
            a, caps = b.available(), b.capabilities
            table.add_row(
                name,
                "[green]yes[/]" if a.ok else "[red]no[/]",
                ",".join(sorted(caps.modes)),
                ",".join(sorted(caps.devices)),
                ",".join(sorted(caps.precisions)),
                b.description if a.ok else a.reason,
            )
    console.print(table)
    return 0


def cmd_env(args: argparse.Namespace, console: Console) -> int:
    from stackcost.env import collect

    print(json.dumps(collect(), indent=2))
    return 0


COMMANDS = {"run": cmd_run, "list": cmd_list, "env": cmd_env}


def main(argv: Sequence[str] | None = None) -> int:
    # Piped output gets a wide table rather than rich's 80-column default.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args, console)
    except (UsageError, SpecError) as exc:
        print(f"stackcost: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stackcost: interrupted; completed repetitions are stored", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
