"""`stackcost heldout MODEL`: held-out accuracy of trained weights, fp32 and quantized, on
each rung.

The weights come from `stackcost train --keep-weights`, kept under their recipe; a recipe
not kept yet is trained first, through that same command (eager only). A checkpoint folder
(hf:./folder) is scored on the user's own --data instead (api/quality_checkpoint.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.api import quality
from stackcost.api.quality import CLASSIFIER, DECODER, DEFAULT_WEIGHTS, default_threads
from stackcost.errors import SpecError
from stackcost.outputs import check_output_dir, check_output_file, write_output
from stackcost.report import heldout_table as view
from stackcost.runspec.grammar import parse_choices, parse_options, parse_positive_ints, split_list

OUTPUTS = (".json", ".md")
# The flags of a recipe stackcost trains itself, which a checkpoint's own weights make moot.
TRAINING_FLAGS = (
    ("--dataset", "dataset"), ("--data-dir", "data_dir"), ("--epochs", "epochs"),
    ("--train-batch-size", "train_batch_size"), ("--lr", "lr"), ("--optimizer", "optimizer"),
    ("--seed", "seed"), ("-c/--config", "config"),
)  # fmt: skip


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "heldout",
        help="held-out accuracy of trained weights, fp32 and quantized, on each rung",
    )
    p.add_argument(
        "model",
        help="a model `stackcost train` takes (e.g. resnet18, or a decoder: llama-tiny), or "
        "your own checkpoint folder, hf:./folder, scored on --data",
    )
    _add_data_args(p)
    _add_scoring_args(p)
    _add_training_args(p)
    threads = default_threads()
    p.add_argument("--threads", default=str(threads), help=f"intra-op threads (default {threads})")
    p.add_argument(
        "--weights-dir",
        type=Path,
        default=DEFAULT_WEIGHTS,
        help="where trained weights are kept by recipe (default ~/.cache/stackcost/weights)",
    )
    p.add_argument(
        "--db",
        default="stackcost.db",
        help="store the held-out rows (and a training run) go to (default ./stackcost.db)",
    )
    p.add_argument(
        "--option", action="append", default=[], metavar="BACKEND.KEY=VALUE",
        help="a decoder's rung option, as stackcost run's -o takes it "
        "(e.g. llama.cpp.w4_type=Q4_K_M, onnxruntime.accuracy_level=1); repeatable",
    )  # fmt: skip
    p.add_argument("-o", "--output", help="also write the rows to this .json or .md file")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _add_data_args(p: argparse.ArgumentParser) -> None:
    """What is scored: a checkpoint's own examples, or a recipe's dataset."""
    p.add_argument(
        "--data",
        help="a checkpoint's own examples: a causal LM's text (.txt, a folder of .txt, or "
        ".jsonl with a text field); a classifier's labelled examples (.csv or .jsonl with "
        "text [text_pair] and label, or an image folder with one subfolder per class)",
    )
    p.add_argument(
        "--calibration",
        help="a checkpoint's examples int8 calibrates on, in --data's format (default: a "
        "share of --data, never scored)",
    )
    p.add_argument(
        "--calibration-share",
        help="the share of --data int8 calibrates on when no --calibration is given "
        "(default 0.2; those examples are not scored)",
    )
    p.add_argument(
        "--dataset",
        help="an image dataset (default digits), or stdlib-text for a decoder (its default)",
    )
    p.add_argument("--data-dir", help="directory holding the dataset's files")


def _add_scoring_args(p: argparse.ArgumentParser) -> None:
    """Which rungs and precisions, and how each is built and evaluated."""
    rungs, decoder_rungs = ",".join(CLASSIFIER.backends), ",".join(DECODER.backends)
    p.add_argument(
        "--backends",
        help=f"comma list (default {rungs}; for a decoder {decoder_rungs})",
    )
    p.add_argument(
        "--precision",
        help=f"comma list of {', '.join(CLASSIFIER.precisions)} (default: all; a decoder's: "
        f"{', '.join(DECODER.precisions)}; fp32 always runs, as each rung's baseline, and "
        "eager fp32 as the reference)",
    )
    p.add_argument(
        "-c", "--config", action="append", default=[], metavar="KEY=VALUE",
        help="config override of a Hugging Face model, as stackcost train takes it",
    )  # fmt: skip
    p.add_argument("--prompt-len", help="a decoder's context in tokens (default 128)")
    p.add_argument(
        "--batch-size",
        help="the batch each rung is built for and evaluated in, the last one padded "
        "(default 64; a decoder's 16 windows, within onnxruntime-genai's 32)",
    )
    p.add_argument(
        "--calibration-samples",
        default="256",
        help="training-split samples int8 calibrates on (default 256)",
    )


def _add_training_args(p: argparse.ArgumentParser) -> None:
    """Training, when the recipe has no kept weights yet: `stackcost train`'s own defaults."""
    p.add_argument("--epochs", help="training epochs (default: stackcost train's)")
    p.add_argument("--train-batch-size", help="training mini-batch (default: stackcost train's)")
    p.add_argument("--lr", help="learning rate (default: stackcost train's)")
    p.add_argument("--optimizer", help="sgd or adam (default: stackcost train's)")
    p.add_argument("--seed", help="seed for weights and shuffling (default 0)")
    p.add_argument(
        "--limit",
        help="use the first N samples of each split (a checkpoint: score at most N examples, "
        "or N windows of a decoder's text)",
    )


def train_args(args: argparse.Namespace) -> argparse.Namespace:
    """The `stackcost train` command that trains (and keeps) this recipe's weights: eager
    only, the flags given here, its own defaults for the rest."""
    from stackcost.commands import train

    parser = argparse.ArgumentParser(prog="stackcost")
    train.add_parser(parser.add_subparsers())
    argv = [
        "train", args.model, "--backends", "eager",
        "--keep-weights", str(args.weights_dir), "--db", args.db, "--threads", args.threads,
    ]  # fmt: skip
    for config in args.config:
        argv += ["-c", config]
    for flag, value in (
        ("--dataset", args.dataset),
        ("--prompt-len", args.prompt_len),
        ("--data-dir", args.data_dir),
        ("--epochs", args.epochs),
        ("--batch-size", args.train_batch_size),
        ("--lr", args.lr),
        ("--optimizer", args.optimizer),
        ("--seed", args.seed),
        ("--limit", args.limit),
    ):
        if value is not None:
            argv += [flag, value]
    return parser.parse_args([*argv, *(["--quiet"] if args.quiet else [])])


def check_args(args: argparse.Namespace, decoder: bool = False) -> quality.Scoring:
    """What to score, from the flags; SpecError on bad input. `decoder`: a causal LM on
    text, whose defaults are the generating rungs'."""
    given = quality.defaults(decoder)
    rungs = ",".join(given.backends)
    backends = split_list(args.backends or rungs, "--backends", rungs)
    quality.check_backends(backends, decoder)
    # Before training: a recipe whose windows cannot be scored is refused, not trained.
    if decoder and args.prompt_len is not None:
        quality.check_window(parse_positive_ints(args.prompt_len, "prompt length")[0])
    allowed = given.precisions
    precisions = parse_choices(args.precision or ",".join(allowed), "precision", allowed)
    batch = parse_positive_ints(args.batch_size or str(given.batch_size), "batch size")[0]
    samples = parse_positive_ints(args.calibration_samples, "calibration samples")[0]
    parse_positive_ints(args.threads, "threads")
    quality.check_limit(batch, _number(args.limit, "limit"))
    options = parse_options(args.option)
    quality.check_options(options, backends, decoder)
    if args.output is not None:
        if Path(args.output).suffix not in OUTPUTS:
            raise SpecError(f"-o {args.output!r}: write a {' or '.join(OUTPUTS)} file")
        check_output_file(Path(args.output), "-o")
    check_output_dir(args.weights_dir, "--weights-dir")
    quality.check_store(args.db)
    return quality.Scoring(backends, precisions, batch, samples, options)


def _number(text: str | None, what: str) -> int | None:
    return None if text is None else parse_positive_ints(text, what)[0]


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.api.quality_checkpoint import is_checkpoint
    from stackcost.commands import train
    from stackcost.commands.run import this_command

    if is_checkpoint(args.model):
        return checkpoint_run(args, console)
    for flag, value in (("--data", args.data), ("--calibration", args.calibration),
                        ("--calibration-share", args.calibration_share)):  # fmt: skip
        if value is not None:
            raise SpecError(
                f"{flag} applies to a checkpoint folder (hf:./folder); {args.model} is "
                "trained and scored on --dataset"
            )
    targs = train_args(args)
    plan = check_args(args, train.trains_text(targs))
    # The recipe as `stackcost train` validates it (its model asked about, its data checked).
    recipe = next(c for c in train.spec_from_args(targs).spec.cells() if c.backend == "eager")
    weights = trained_weights(args, targs, recipe, console)
    if weights is None:
        return 1
    result = quality.score_recipe(
        recipe, weights, backends=plan.backends, precisions=plan.precisions,
        batch_size=plan.batch_size, calibration_samples=plan.calibration_samples,
        options=plan.options, data_dir=args.data_dir, db=args.db, command=this_command(),
        on_start=started(args, "the held-out split"),
    )  # fmt: skip
    return show(args, result, console)


def trained_weights(
    args: argparse.Namespace, targs: argparse.Namespace, recipe: Any, console: Console
) -> Path | None:
    """The weights kept for `recipe` in --weights-dir, trained first (by `stackcost train`,
    its table printed) when none are kept yet; None when training kept none."""
    from stackcost.commands import train

    err = Console(stderr=True)
    weights = quality.kept_weights(args.weights_dir, recipe)
    if weights is not None:
        err.print(Text(f"trained weights kept for this recipe: {weights}"))
        return weights
    err.print(
        Text(
            f"training {args.model} on {recipe.train.dataset} ({recipe.train.epochs} epochs, "
            f"eager): no weights kept for this recipe in {args.weights_dir} yet"
        )
    )
    train.run(targs, console)
    weights = quality.kept_weights(args.weights_dir, recipe)
    if weights is None:
        err.print(Text("training kept no weights (see its table): nothing to evaluate"))
    return weights


def checkpoint_run(args: argparse.Namespace, console: Console) -> int:
    """A user's checkpoint folder on the user's own --data (api/quality_checkpoint.py
    checks and reads them): a decoder's perplexity table, or a classifier's accuracy one."""
    from stackcost.api import quality_checkpoint as given
    from stackcost.commands.run import this_command

    for flag, name in TRAINING_FLAGS:
        if getattr(args, name):
            raise SpecError(
                f"{flag} does not apply to checkpoint {args.model}: its weights are its own; "
                "it is scored on --data"
            )
    if args.data is None:
        raise SpecError(
            f"give --data: checkpoint {args.model} is scored on your own examples (text for "
            "a causal LM; labelled text or an image folder for a classifier)"
        )
    ck = given.open_checkpoint(args.model)
    plan = check_args(args, ck.decoder)
    given.check_applies(
        ck,
        calibration=args.calibration,
        calibration_share=args.calibration_share,
        prompt_len=args.prompt_len,
    )
    share = calibration_share(args)  # a classifier's: a decoder's was refused above
    err = Console(stderr=True)
    result = given.heldout_checkpoint(
        ck, args.data, backends=plan.backends, precisions=plan.precisions,
        batch_size=plan.batch_size, calibration=args.calibration, calibration_share=share,
        prompt_len=_number(args.prompt_len, "prompt length"), limit=_number(args.limit, "limit"),
        threads=_number(args.threads, "threads"), options=plan.options, db=args.db,
        command=this_command(), on_start=started(args, "your examples"),
        on_notice=lambda line: err.print(Text(line)),
    )  # fmt: skip
    return show(args, result, console)


def calibration_share(args: argparse.Namespace) -> float | None:
    """--calibration-share as a fraction; SpecError naming the text given."""
    if args.calibration_share is None:
        return None
    if args.calibration is not None:
        raise SpecError("give --calibration or --calibration-share, not both")
    try:
        share = float(args.calibration_share)
    except ValueError:
        share = -1.0
    if not 0 < share < 1:
        raise SpecError(
            f"--calibration-share {args.calibration_share!r}: a fraction between 0 and 1 "
            "(exclusive), e.g. 0.2"
        )
    return share


def started(args: argparse.Namespace, what: str) -> Any:
    """The progress line as each rung and precision starts (none with --quiet)."""
    err = Console(stderr=True)

    def started(backend: str, precision: str) -> None:
        if not args.quiet:
            err.print(Text(f"evaluating {backend} {precision} on {what}…"))

    return started


def show(args: argparse.Namespace, result: quality.QualityResult, console: Console) -> int:
    """Print the judged rows' table and where they were stored, write -o; the exit code
    (1 when a row is wrong or failed)."""
    model, weights, rows = args.model, result.weights, result.rows
    if result.decoder:
        data = view.decoder_data(result.data)
        console.print(view.decoder_table(rows, model, weights, data))
        record: dict[str, Any] = {"model": model, "checkpoint": str(weights)}
        if result.data is not None:
            record["text"] = result.data
        text = view.decoder_markdown(rows, model, weights, data)
    else:
        console.print(view.table(rows, model, result.dataset, weights))
        record = {"model": model, "weights": str(weights), **(result.data or {})}
        text = view.markdown(rows, model, weights)
    Console(stderr=True).print(Text(view.stored_line(result.stored, result.run_id, result.db)))
    if args.output is not None:
        write_rows(Path(args.output), text, record, rows)
    return 1 if result.failed else 0


def write_rows(path: Path, markdown_text: str, record: dict, rows: list) -> None:
    """-o: the table as markdown (.md), or `record` with every row's record (.json)."""
    rows_json = {**record, "rows": [r.record() for r in rows]}
    text = markdown_text if path.suffix == ".md" else json.dumps(rows_json, indent=2)
    write_output(path, text, "-o")
