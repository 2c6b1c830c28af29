"""`stackcost train MODEL`: train the same weights on the same data through each backend."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from stackcost.axes import DEVICES, GRID_AXES
from stackcost.commands.axes import number
from stackcost.commands.run import add_hf_args, add_session_args, import_timeout
from stackcost.data.stdlib_text import NAME as TEXT_DATASET
from stackcost.env import cores
from stackcost.errors import SpecError
from stackcost.execute import scratch
from stackcost.outputs import check_output_dir
from stackcost.runspec.grammar import (
    check_env_names,
    parse_choices,
    parse_config,
    parse_positive_ints,
    split_list,
)
from stackcost.runspec.run import check_threads, db_problem, model_ref
from stackcost.scenarios.train import KEPT_CHECKPOINT, KEPT_WEIGHTS, TEXT_TRAINERS, kept_name
from stackcost.workload import SIZE_AXES, Workload
from stackcost.zoo.hf import CAUSAL_LM

if TYPE_CHECKING:
    from stackcost.cell import Cell, ModelRef
    from stackcost.execute.runner import Prepared


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
    p.add_argument(
        "--pageable",
        action="store_true",
        help="on a GPU, copy each batch from pageable host memory instead of pinned "
        "(the copy's bytes and time are recorded per batch either way)",
    )
    p.add_argument("--init", default="torch-default", help="initialization scheme (recorded)")
    p.add_argument("--repeats", default="1", help="independent processes per backend")
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
    p.add_argument(
        "--threads",
        default=str(cores()),
        help=f"comma list of intra-op thread counts (default {cores()}, this machine)",
    )
    p.add_argument("--device", default="cpu", help=GRID_AXES["device"].help() + " (default cpu)")
    p.add_argument("--limit", help="use the first N samples of each split")
    p.add_argument("--seed", default="0", help="seed for weights, RNGs and shuffling (default 0)")
    p.add_argument("--timeout", default="1800", help="seconds per repetition (default 1800)")
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
    add_session_args(p)
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the latest run of this same command in this environment: "
        "only the repetitions it lacks (or that were interrupted) are trained",
    )


def spec_from_args(args: argparse.Namespace) -> Prepared:
    """The validated TrainSpec, prepared: every bad input raises SpecError before any store
    exists. The model and the custom backends are asked about in one child at most
    (probe.ask), whose answers the run takes as they are (prepare) instead of asking again."""
    import os

    from stackcost import zoo
    from stackcost.cell import TrainConfig
    from stackcost.data import DATASETS
    from stackcost.execute.environ import worker_environ
    from stackcost.execute.probe import ask
    from stackcost.execute.runner import prepare
    from stackcost.runspec.train import (
        TrainSpec,
        check_backend_names,
        check_backends,
        check_data,
        check_learning_rate,
    )

    epochs = parse_positive_ints(args.epochs, "epochs")[0]
    batch = parse_positive_ints(args.batch_size, "batch size")[0]
    lr = check_learning_rate(args.lr)
    if args.optimizer not in ("sgd", "adam"):
        raise SpecError(f"unknown optimizer {args.optimizer!r} (allowed: sgd, adam)")
    momentum = number(args.momentum, "momentum", float, -1e-12)
    seed = int(number(args.seed, "seed", int, -1))
    threads = parse_positive_ints(args.threads, "threads")
    check_threads(threads)
    devices = parse_choices(args.device, "device", DEVICES)
    if not devices:
        raise SpecError(f"--device {args.device!r}: give one or more of {', '.join(DEVICES)}")
    if args.pageable and "cuda" not in devices:
        raise SpecError("--pageable is about the copy to a GPU: add --device cuda")
    problem = check_env_names(args.inherit_env)
    if problem:
        raise SpecError(problem)
    backends = split_list(args.backends, "--backends", "eager,inductor")
    check_backend_names(backends)
    if args.model in zoo.MODELS:  # its inputs are in the table: no probe needed to refuse
        check_fed_images(args.model, zoo.MODELS[args.model], args.dataset)
    if trains_text(args):  # what needs no probe is refused before it
        check_text_request(args, backends)
    asked = model_to_train(args, seed)
    environ = worker_environ(os.environ, {}, args.inherit_env)
    answers = ask([asked], {name: {} for name in backends}, environ, import_timeout(args))
    model, workload = trained_model(args, asked, answers.workloads)
    dataset = check_fed_images(args.model, workload, args.dataset)
    check_data(dataset, args.data_dir)
    check_vocabulary(dataset, workload)
    check_backends(backends, facts=answers.facts)
    spec = TrainSpec(
        model=model,
        backends=backends,
        train=TrainConfig(
            dataset=dataset,
            epochs=epochs,
            lr=lr,
            optimizer=args.optimizer,
            momentum=momentum,
            schedule=args.schedule,
            limit=parse_positive_ints(args.limit, "limit")[0] if args.limit else None,
            data_seed=seed,
            pageable=args.pageable,
        ),
        batch_size=batch,
        sizes=train_sizes(args, workload, DATASETS[dataset]),
        threads=threads,
        devices=devices,
        repeats=parse_positive_ints(args.repeats, "repeats")[0],
        timeout_s=number(args.timeout, "timeout"),
        data_dir=str(Path(args.data_dir).resolve()) if args.data_dir else None,
        inherit_env=args.inherit_env,
    )
    check_full_batch(spec)
    return prepare(spec, answers)


def check_fed_images(name: str, workload: Workload, dataset: str | None) -> str:
    """The dataset to train on (digits for a model fed images, stdlib-text for a causal
    LM, else synthetic): an image dataset only for a model fed images, text only for a
    causal LM. A zoo entry's inputs are its kind's whatever -c and --head change, so its
    table row answers before the probe."""
    from stackcost.data import DATASETS, stdlib_text

    causal = workload.domain == "generation"
    dataset = dataset or (
        "digits" if workload.image_input else stdlib_text.NAME if causal else "synthetic"
    )
    if dataset not in DATASETS:
        raise SpecError(f"unknown dataset {dataset!r} (allowed: {', '.join(DATASETS)})")
    fed = DATASETS[dataset].fed
    if fed == "text" and not causal:
        raise SpecError(
            f"--dataset {dataset} trains a causal language model: {name} has no LM head "
            "(a decoder trains on it with --head causal-lm)"
        )
    if workload.image_input is None and fed == "images" and dataset != "synthetic":
        fed_with = ", ".join(f"{i.name} ({i.dtype})" for i in workload.inputs)
        allowed = f"{stdlib_text.NAME}, or synthetic" if causal else "synthetic"
        raise SpecError(
            f"--dataset {dataset}: {name} is fed {fed_with}, not images "
            f"(allowed: {allowed}, inputs drawn as the model declares them)"
        )
    return dataset


def check_text_request(args: argparse.Namespace, backends: list[str]) -> None:
    """A causal LM trains on text through the scenario's own torch loop: the rungs whose
    step is torch autograd over the model (eager, inductor, torchscript); the others train
    classifiers. It reads --prompt-len tokens and generates none. A zoo decoder's
    vocabulary is in its table row unless -c changes it."""
    from stackcost import zoo

    others = [b for b in backends if b not in TEXT_TRAINERS]
    if others:
        raise SpecError(
            f"a causal LM trains on {TEXT_DATASET} through {', '.join(TEXT_TRAINERS)} only; "
            f"{', '.join(others)} train{'s' if len(others) == 1 else ''} classifiers"
        )
    if args.size_new_tokens is not None:
        raise SpecError(
            "--new-tokens is about generation: a causal LM trains on --prompt-len tokens "
            "of context, scored on the next token at each"
        )
    if args.model in zoo.MODELS and "vocab_size" not in parse_config(args.config):
        check_vocabulary(TEXT_DATASET, zoo.MODELS[args.model])


def check_vocabulary(dataset: str, workload: Workload) -> None:
    """Text's tokenizer is learnt at the model's vocabulary size, which must leave room
    for merges beside the bytes."""
    from stackcost.data import DATASETS, stdlib_text

    if DATASETS[dataset].fed != "text":
        return
    vocab = next((i.high for i in workload.inputs if i.kind == "ids"), None) or 0
    if vocab < stdlib_text.MIN_VOCAB:
        raise SpecError(
            f"--dataset {dataset} learns a BPE tokenizer of the model's {vocab} ids, which "
            f"leave no room for merges beside the 256 bytes: give at least "
            f"{stdlib_text.MIN_VOCAB} (e.g. -c vocab_size=2048)"
        )


def check_full_batch(spec: Any) -> None:
    """A training split smaller than one batch trains on nothing (every epoch drops its
    last partial batch): refused here, not as a failed cell. Known before reading the data
    where --limit bounds the split, or the split is drawn (synthetic)."""
    from stackcost.data.synthetic import DEFAULT_SIZES

    cfg = spec.train
    most = [cfg.limit] if cfg.limit is not None else []
    if cfg.dataset == "synthetic":
        most.append(DEFAULT_SIZES["train"])
    if most and spec.batch_size > min(most):
        kept = f"--limit {cfg.limit} keeps" if min(most) == cfg.limit else f"{cfg.dataset} has"
        raise SpecError(
            f"--batch-size {spec.batch_size} is more than the {min(most)} training samples "
            f"{kept}: no full batch to train on"
        )


def _classes(args: argparse.Namespace) -> tuple[int | None, Any]:
    """--num-classes (None when not given) and the --dataset's info (None when not given)."""
    from stackcost.data import DATASETS

    if args.dataset is not None and args.dataset not in DATASETS:
        raise SpecError(f"unknown dataset {args.dataset!r} (allowed: {', '.join(DATASETS)})")
    given = parse_positive_ints(args.num_classes, "num-classes")[0] if args.num_classes else None
    info = DATASETS[args.dataset] if args.dataset else None
    if given and info and info.num_classes not in (None, given):
        raise SpecError(f"--num-classes {given}: {info.name} has {info.num_classes} classes")
    return given, info


def model_to_train(args: argparse.Namespace, seed: int) -> ModelRef:
    """The ModelRef to ask about (probe.ask) before training it: trained_model completes it.

    Its width is the dataset's class count (10 for synthetic data unless --num-classes);
    a Hugging Face model gets its classification head unless --head says otherwise; any
    other's own Workload (a factory's, a zoo model's that is no CNN) says how wide its
    head is, unless --num-classes.
    """
    from stackcost.data import DATASETS

    given, info = _classes(args)
    hf = _is_hf(args.model)
    lm = trains_text(args)
    if lm and not hf:
        raise SpecError(
            f"--dataset {TEXT_DATASET} trains a causal language model: {args.model} has no "
            "LM head (train a decoder: llama-tiny, or hf:<type> --head causal-lm)"
        )
    head = args.head or (CAUSAL_LM if lm else "classification" if hf else None)
    if hf and head not in ("classification", CAUSAL_LM):
        raise SpecError(
            f"--head {head}: training needs --head classification (or {CAUSAL_LM}, on text)"
        )
    if hf and (head == CAUSAL_LM) != lm:
        what = f"--dataset {args.dataset}" if args.dataset else "the default dataset"
        raise SpecError(
            f"--head {head} does not train on {what}: a causal LM trains on "
            f"--dataset {TEXT_DATASET} (its next tokens), a classifier on labelled samples"
        )
    classes = given or (info.num_classes if info else None) or 10
    config = parse_config(args.config)

    def ref(num_classes: int | None, in_channels: int | None = None) -> ModelRef:
        return model_ref(
            args.model, num_classes=num_classes, in_channels=in_channels, init=args.init,
            seed=seed, config=config, head=head,
        )  # fmt: skip

    if lm:
        return ref(None)
    if _is_zoo_cnn(args.model):
        # A zoo CNN takes the dataset's channels (3 for data sized at load).
        native = (info or DATASETS["digits"]).native_shape
        return ref(classes, native[0] if native else 3)
    # Any other: its own Workload says how wide its head is (trained_model).
    return ref(classes if hf else given)


def trains_text(args: argparse.Namespace) -> bool:
    """Whether the model learns text as a causal LM: --dataset says so, else --head, else
    a zoo decoder's own head (llama-tiny trains on stdlib-text by default)."""
    from stackcost import zoo
    from stackcost.data import DATASETS

    if args.dataset is not None:  # an unknown name is refused by _classes
        return args.dataset in DATASETS and DATASETS[args.dataset].fed == "text"
    if args.head is not None:
        return bool(args.head == CAUSAL_LM)
    entry = zoo.MODELS.get(args.model)
    return entry is not None and entry.params.get("head") == CAUSAL_LM


def _is_hf(name: str) -> bool:
    from stackcost import zoo

    return name.startswith("hf:") or zoo.is_hf_entry(name)


def _is_zoo_cnn(name: str) -> bool:
    from stackcost import zoo

    return name in zoo.MODELS and zoo.MODELS[name].image_input is not None


def trained_model(
    args: argparse.Namespace, model: ModelRef, learned: Mapping[str, dict[str, Any]]
) -> tuple[ModelRef, Workload]:
    """The ModelRef to train and its workload, which must end in a classification head.

    `learned`: the workloads the probe learned (by model name), for a model in user code
    or transformers; a zoo model's is read here.
    """
    from stackcost import zoo

    found = (
        Workload.from_facts(learned[model.name]) if model.needs_probe else zoo.workload_of(model)
    )
    if _is_zoo_cnn(args.model) or _is_hf(args.model):  # sized to the data by model_to_train
        return model, found
    given, info = _classes(args)
    if found.num_classes == 0:
        raise SpecError(
            f"{args.model} has no classification head (its Workload's num_classes is 0): "
            "training needs one"
        )
    if found.image_input and info and info.num_classes not in (None, found.num_classes):
        raise SpecError(
            f"{args.model} has {found.num_classes} classes; {info.name} has {info.num_classes}"
        )
    return model.model_copy(update={"num_classes": given or found.num_classes}), found


def train_sizes(args: argparse.Namespace, workload: Workload, info: Any) -> dict[str, int]:
    """One value per size axis of the model: the flag's, else the model's default; for an
    image model, the smallest resolution it accepts that still holds the dataset's images
    (datasets sized at load, synthetic and VOC, get 32 px)."""
    from stackcost.runspec.train import default_resolution

    sizes: dict[str, int] = {}
    for axis in SIZE_AXES.values():
        text = getattr(args, f"size_{axis.name}")
        if text is None:
            continue
        value = parse_positive_ints(text, axis.name.replace("_", " "))[0]
        problem = workload.size_problem(axis.name, value)
        if problem:
            raise SpecError(problem)
        sizes[axis.name] = value
    defaults = dict(workload.sizes)
    if workload.domain == "generation":  # a causal LM learns from prompt_len tokens of text
        defaults.pop("new_tokens", None)
    if workload.image_input is not None and "resolution" in defaults:
        native = info.native_shape[-1] if info.native_shape else 32
        defaults["resolution"] = default_resolution(workload, native)
    return {axis: sizes.get(axis, default) for axis, default in defaults.items()}


def save_initial_weights(spec: Any, directory: Path) -> tuple[str, str]:
    """Build the model once (seeded, explicit init) and save it: (path, weights digest)."""
    import torch

    from stackcost import zoo

    model = zoo.build_model(spec.model, spec.sizes)
    path = directory / "initial.pt"
    torch.save(model.state_dict(), path)
    return str(path), zoo.weights_digest(model)


def check_resumable(spec: Any, db: Path, digest: str) -> None:
    """--resume continues a run only if its repetitions started from these same weights
    (the build is seeded, so they do unless the model code changed since)."""
    from stackcost.env import collect, fingerprint
    from stackcost.store.database import Store

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


def file_weights(root: Path, cell: Cell, trained: Path, console: Console) -> Path | None:
    """File the weights a worker saved at `trained` in the artifact cache `root` under
    `cell`'s recipe, and say where; a recipe already kept keeps its first weights."""
    import shutil

    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.scenarios.train import weights_recipe

    if not trained.exists():  # diverged, failed, or skipped by --resume
        console.print(Text("weights not kept: the eager rung saved none in this run"))
        return None
    recipe = weights_recipe(cell)

    def make(home: Path) -> dict[str, Any]:
        shutil.move(trained, home / trained.name)
        return {"recipe": recipe}

    home, record = ArtifactCache(root).reuse_or_make(recipe, make)
    state = "already kept" if record["artifact"]["reused"] else "kept"
    kept = home / trained.name
    if trained.name == KEPT_CHECKPOINT:
        console.print(Text(f"checkpoint {state}: {kept} (measure it: stackcost run hf:{kept} "
                           "--scenario generate)"))  # fmt: skip
    else:
        console.print(Text(f"weights {state}: {kept}"))
    return kept


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.commands.run import measure_and_show
    from stackcost.report.train_table import train_table
    from stackcost.scenarios.task import TrainTask

    prepared = spec_from_args(args)
    spec = prepared.spec
    problem = db_problem(args.db)  # before the weights are built: bad input costs nothing
    if problem:
        raise SpecError(problem)
    if args.keep_weights is not None:
        check_output_dir(args.keep_weights, "--keep-weights")
    kept = next((c for c in spec.cells() if c.backend == "eager"), None)
    if args.keep_weights is not None and kept is None:
        raise SpecError("--keep-weights keeps the eager rung's weights: add eager to --backends")
    # The run's scratch directory: a killed run's initial weights are cleaned by the next.
    artifacts = scratch.make()
    try:
        weights_path, digest = save_initial_weights(spec, artifacts)
        if args.resume:
            check_resumable(spec, Path(args.db), digest)

        # The worker saves the eager rung's weights into the run's scratch directory; they
        # are filed under their recipe once the run is over.
        trained = artifacts / (kept_name(kept) if kept is not None else KEPT_WEIGHTS)

        def make_task(cell, rep: int, workdir: str) -> TrainTask:
            keep = args.keep_weights is not None and rep == 0
            keep = keep and kept is not None and cell.key() == kept.key()
            return TrainTask(
                cell=cell,
                repetition=rep,
                timeout_s=spec.timeout_s,
                workdir=workdir,
                weights_path=weights_path,
                weights_digest=digest,
                data_dir=spec.data_dir,
                keep_weights=str(trained) if keep else None,
            )

        code = measure_and_show(
            prepared,  # asked once, in spec_from_args: measure_and_show asks nothing more
            args,
            console,
            resume=args.resume,
            table=train_table,
            make_task=make_task,
            fresh_hint="without --resume every backend trains again in a new run",
        )
        if args.keep_weights is not None and kept is not None:
            file_weights(args.keep_weights, kept, trained, console)
        return code
    finally:
        scratch.remove(artifacts)
