"""`stackcost train MODEL`: train the same weights on the same data through each backend."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from stackcost.api.training import (
    SCHEDULES,
    SIZE_AXES,
    TrainingRequest,
    default_threads,
    prepare_training,
    run_weights,
)
from stackcost.api.training import trains_text as request_trains_text
from stackcost.axes import DEVICES, GRID_AXES
from stackcost.commands.axes import number
from stackcost.commands.run import add_hf_args, add_session_args, import_timeout, measure_and_show
from stackcost.runspec.grammar import parse_choices, parse_config, parse_positive_ints, split_list
from stackcost.runspec.train import check_learning_rate

if TYPE_CHECKING:
    from stackcost.api.training import Prepared


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train one model through backends (eager, inductor, ...)")
    p.add_argument(
        "model",
        help="zoo name (see `stackcost list models`), hf:<model_type>, or package.module:ATTR "
        "(a Workload with a classification head)",
    )
    p.add_argument(
        "--dataset",
        help="digits, mnist, cifar10, ..., synthetic (default: digits for an image model, "
        "else synthetic: inputs drawn as the model declares them, random labels)",
    )
    p.add_argument("--data-dir", help="directory holding the dataset's files")
    p.add_argument("--backends", default=",".join(TrainingRequest.backends), help="comma list")
    _add_recipe_args(p)
    p.add_argument(
        "--repeats", default=str(TrainingRequest.repeats), help="independent processes per backend"
    )
    for axis in SIZE_AXES.values():  # --resolution, --seq-len, --samples
        default = (
            "the model's minimum that fits the data"
            if axis.name == "resolution"
            else ("the model's")
        )
        p.add_argument(
            axis.flag, dest=f"size_{axis.name}", metavar="N",
            help=f"{axis.label} (default: {default})",
        )  # fmt: skip
    p.add_argument(
        "--num-classes", help="classes of synthetic data (default 10; a dataset's own otherwise)"
    )
    add_hf_args(p, "(default for training: classification)")
    _add_run_args(p)
    add_session_args(p)
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the latest run of this same command in this environment: "
        "only the repetitions it lacks (or that were interrupted) are trained",
    )


def _add_recipe_args(p: argparse.ArgumentParser) -> None:
    """How the model is trained: the recipe every backend follows (the API's defaults)."""
    d = TrainingRequest
    p.add_argument(
        "--epochs",
        default=str(d.epochs),
        help=f"passes over the training split (default {d.epochs})",
    )
    p.add_argument(
        "--batch-size", default=str(d.batch_size), help=f"mini-batch size (default {d.batch_size})"
    )
    p.add_argument("--lr", default=f"{d.lr:g}", help=f"learning rate (default {d.lr:g})")
    p.add_argument("--optimizer", default=d.optimizer, help="sgd (default) or adam")
    p.add_argument(
        "--momentum", default=f"{d.momentum:g}", help=f"SGD momentum (default {d.momentum:g})"
    )
    p.add_argument(
        "--schedule",
        default=d.schedule,
        choices=list(SCHEDULES),
        help=f"learning-rate schedule over all steps (default {d.schedule})",
    )
    p.add_argument(
        "--pageable",
        action="store_true",
        help="on a GPU, copy each batch from pageable host memory instead of pinned "
        "(the copy's bytes and time are recorded per batch either way)",
    )
    p.add_argument("--init", default=d.init, help="initialization scheme (recorded)")


def _add_run_args(p: argparse.ArgumentParser) -> None:
    """Where and how the run goes: threads, device, samples, seed, timeout, store, kept
    weights and the workers' environment."""
    d = TrainingRequest
    p.add_argument(
        "--threads",
        default=str(default_threads()),
        help=f"comma list of intra-op thread counts (default {default_threads()}, this machine)",
    )
    p.add_argument("--device", default="cpu", help=GRID_AXES["device"].help() + " (default cpu)")
    p.add_argument("--limit", help="use the first N samples of each split")
    p.add_argument(
        "--seed",
        default=str(d.seed),
        help=f"seed for weights, RNGs and shuffling (default {d.seed})",
    )
    p.add_argument(
        "--timeout",
        default=f"{d.timeout_s:g}",
        help=f"seconds per repetition (default {d.timeout_s:g})",
    )
    p.add_argument("--db", default="stackcost.db", help="SQLite store (default ./stackcost.db)")
    p.add_argument(
        "--keep-weights",
        metavar="DIR",
        type=Path,
        help="keep the eager rung's trained weights in this artifact cache, keyed by their "
        "recipe (model, sizes, batch, training config), e.g. for `stackcost heldout`",
    )
    p.add_argument("--quiet", action="store_true", help="no live progress")
    p.add_argument(
        "--inherit-env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this environment variable to workers (repeatable; recorded with the run)",
    )


def request_from_args(args: argparse.Namespace) -> TrainingRequest:
    """The flags as typed values: a value that does not parse is refused here, in the
    words of the flag it was given to."""
    first = lambda text, what: parse_positive_ints(text, what)[0]  # noqa: E731
    return TrainingRequest(
        model=args.model,
        epochs=first(args.epochs, "epochs"),
        batch_size=first(args.batch_size, "batch size"),
        lr=check_learning_rate(args.lr),
        optimizer=args.optimizer,
        momentum=number(args.momentum, "momentum", float, -1e-12),
        seed=int(number(args.seed, "seed", int, -1)),
        threads=parse_positive_ints(args.threads, "threads"),
        devices=parse_choices(args.device, "device", DEVICES),
        pageable=args.pageable,
        inherit_env=args.inherit_env,
        backends=split_list(args.backends, "--backends", "eager,inductor"),
        dataset=args.dataset,
        num_classes=first(args.num_classes, "num-classes") if args.num_classes else None,
        head=args.head,
        config=parse_config(args.config),
        init=args.init,
        limit=first(args.limit, "limit") if args.limit else None,
        sizes={
            axis.name: first(text, axis.name.replace("_", " "))
            for axis in SIZE_AXES.values()
            if (text := getattr(args, f"size_{axis.name}")) is not None
        },
        repeats=first(args.repeats, "repeats"),
        timeout_s=number(args.timeout, "timeout"),
        data_dir=args.data_dir,
        schedule=args.schedule,
    )


def spec_from_args(args: argparse.Namespace) -> Prepared:
    """The validated TrainSpec, prepared: every bad input raises SpecError before any
    store exists (stackcost.api.training.prepare_training)."""
    return prepare_training(request_from_args(args), import_timeout_s=import_timeout(args))


def trains_text(args: argparse.Namespace) -> bool:
    """Whether the model learns text as a causal LM (--dataset, else --head, else a zoo
    decoder's own head); nothing else is read or checked."""
    request = TrainingRequest(model=args.model, dataset=args.dataset, head=args.head)
    return request_trains_text(request)


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.report.terminal.train import train_table

    prepared = spec_from_args(args)
    # The store and --keep-weights are checked before the initial weights are built.
    with run_weights(
        prepared, db=args.db, keep_weights=args.keep_weights, resume=args.resume
    ) as weights:
        code = measure_and_show(
            prepared,  # asked once, in spec_from_args: measure_and_show asks nothing more
            args,
            console,
            resume=args.resume,
            table=train_table,
            make_task=weights.make_task,
            fresh_hint="without --resume every backend trains again in a new run",
        )
        weights.keep(lambda line: console.print(Text(line)))
        return code
