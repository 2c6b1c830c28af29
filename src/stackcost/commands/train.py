"""`stackcost train MODEL`: train the same weights on the same data through each backend."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from stackcost.commands.axes import number
from stackcost.commands.run import add_session_args
from stackcost.env import cores
from stackcost.execute import scratch
from stackcost.execute.environ import check_names
from stackcost.spec import SpecError, check_threads, db_problem, model_ref, parse_positive_ints


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train one model through backends (eager, inductor, ...)")
    p.add_argument("model", help="zoo name (see `stackcost list models`)")
    p.add_argument("--dataset", default="digits", help="digits (default), mnist, cifar10, ...")
    p.add_argument("--data-dir", help="directory holding the dataset's files")
    p.add_argument("--backends", default="eager,inductor,torchscript", help="comma list")
    p.add_argument("--epochs", default="5", help="passes over the training split (default 5)")
    p.add_argument("--batch-size", default="64", help="mini-batch size (default 64)")
    p.add_argument("--lr", default="0.05", help="learning rate (default 0.05)")
    p.add_argument("--optimizer", default="sgd", help="sgd (default) or adam")
    p.add_argument("--momentum", default="0.9", help="SGD momentum (default 0.9)")
    p.add_argument(
        "--schedule",
        default="cosine",
        choices=["cosine", "constant"],
        help="learning-rate schedule over all steps (default cosine)",
    )
    p.add_argument("--init", default="torch-default", help="initialization scheme (recorded)")
    p.add_argument("--repeats", default="1", help="independent processes per backend")
    p.add_argument(
        "--resolution", help="input size (default: the model's minimum that fits the data)"
    )
    p.add_argument("--threads", default=str(cores()), help=f"intra-op threads (default {cores()})")
    p.add_argument("--limit", help="use the first N samples of each split")
    p.add_argument("--seed", default="0", help="seed for weights, RNGs and shuffling (default 0)")
    p.add_argument("--timeout", default="1800", help="seconds per repetition (default 1800)")
    p.add_argument("--db", default="stackcost.db", help="SQLite store (default ./stackcost.db)")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    p.add_argument(
        "--inherit-env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this environment variable to workers (repeatable; recorded with the run)",
    )
    add_session_args(p)
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the latest run of this same command in this environment: "
        "only the repetitions it lacks (or that were interrupted) are trained",
    )


def spec_from_args(args: argparse.Namespace):
    """The validated TrainSpec; every bad input raises SpecError before any store exists."""
    from stackcost import zoo
    from stackcost.cell import TrainConfig
    from stackcost.data import DATASETS
    from stackcost.train.spec import (
        TrainSpec,
        check_backends,
        check_data,
        check_learning_rate,
        default_resolution,
    )

    if args.model not in zoo.MODELS:
        raise SpecError(f"unknown model {args.model!r} (allowed: {', '.join(zoo.MODELS)})")
    check_data(args.dataset, args.data_dir)
    info = DATASETS[args.dataset]
    epochs = parse_positive_ints(args.epochs, "epochs")[0]
    batch = parse_positive_ints(args.batch_size, "batch size")[0]
    lr = check_learning_rate(args.lr)
    if args.optimizer not in ("sgd", "adam"):
        raise SpecError(f"unknown optimizer {args.optimizer!r} (allowed: sgd, adam)")
    momentum = number(args.momentum, "momentum", float, -1e-12)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    check_backends(backends)
    channels = info.native_shape[0] if info.native_shape else 3
    # Datasets sized at load (synthetic, VOC) get 32 px unless --resolution says otherwise.
    native = info.native_shape[-1] if info.native_shape else 32
    if args.resolution:
        resolution = parse_positive_ints(args.resolution, "resolution")[0]
        problem = zoo.check_resolution(args.model, resolution)
        if problem:
            raise SpecError(problem)
    else:
        resolution = default_resolution(args.model, native)
    seed = int(number(args.seed, "seed", int, -1))
    threads = parse_positive_ints(args.threads, "threads")
    check_threads(threads)
    problem = check_names(args.inherit_env)
    if problem:
        raise SpecError(problem)
    model = model_ref(
        args.model,
        num_classes=info.num_classes or 10,
        in_channels=channels,
        init=args.init,
        seed=seed,
    )
    return TrainSpec(
        model=model,
        backends=backends,
        train=TrainConfig(
            dataset=args.dataset,
            epochs=epochs,
            lr=lr,
            optimizer=args.optimizer,
            momentum=momentum,
            schedule=args.schedule,
            limit=parse_positive_ints(args.limit, "limit")[0] if args.limit else None,
            data_seed=seed,
        ),
        batch_size=batch,
        resolution=resolution,
        threads=threads,
        repeats=parse_positive_ints(args.repeats, "repeats")[0],
        timeout_s=number(args.timeout, "timeout"),
        data_dir=str(Path(args.data_dir).resolve()) if args.data_dir else None,
        inherit_env=args.inherit_env,
    )


def save_initial_weights(spec: Any, directory: Path) -> tuple[str, str]:
    """Build the model once (seeded, explicit init) and save it: (path, weights digest)."""
    import torch

    from stackcost import zoo

    model = zoo.build_model(spec.model, spec.resolution)
    path = directory / "initial.pt"
    torch.save(model.state_dict(), path)
    return str(path), zoo.weights_digest(model)


def check_resumable(spec: Any, db: Path, digest: str) -> None:
    """--resume continues a run only if its repetitions started from these same weights
    (the build is seeded, so they do unless the model code changed since)."""
    from stackcost.env import collect, fingerprint
    from stackcost.store import Store

    if not db.exists():
        return  # nothing to resume; and opening the store would create the file
    with Store(db) as store:
        run_id = store.find_run(spec.digest(), fingerprint(collect(spec.threads)))
        if run_id is None:
            return
        for _, rep in store.repetitions(run_id, with_samples=False):
            if rep.weights_digest and rep.weights_digest != digest:
                raise SpecError(
                    f"cannot resume run {run_id}: it trained from initial weights "
                    f"{rep.weights_digest[:12]}, this build gives {digest[:12]} "
                    "(run without --resume)"
                )


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.commands.run import measure_and_show
    from stackcost.train.table import train_table
    from stackcost.train.task import TrainTask

    spec = spec_from_args(args)
    problem = db_problem(args.db)  # before the weights are built: bad input costs nothing
    if problem:
        raise SpecError(problem)
    # The run's scratch directory: a killed run's initial weights are cleaned by the next.
    artifacts = scratch.make()
    try:
        weights_path, digest = save_initial_weights(spec, artifacts)
        if args.resume:
            check_resumable(spec, Path(args.db), digest)

        def make_task(cell, rep: int, workdir: str) -> TrainTask:
            return TrainTask(
                cell=cell,
                repetition=rep,
                timeout_s=spec.timeout_s,
                workdir=workdir,
                weights_path=weights_path,
                weights_digest=digest,
                data_dir=spec.data_dir,
            )

        return measure_and_show(
            spec,
            args,
            console,
            resume=args.resume,
            table=train_table,
            make_task=make_task,
            fresh_hint="without --resume every backend trains again in a new run",
        )
    finally:
        scratch.remove(artifacts)
