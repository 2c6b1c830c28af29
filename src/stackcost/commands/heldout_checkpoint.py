"""`stackcost heldout hf:./folder --data PATH`: a user's own checkpoint, scored on the user's
own examples on each rung and precision.

Everything the user gave is checked before anything runs or is stored: the folder (its
files, config, weights and tokenizer), its task (a causal LM is scored on text, a sequence
or image classifier on labelled examples), the data and the calibration set (read whole,
each example within the model's positions). The scoring itself is the trained recipes':
scenarios/decoder_heldout.py for a decoder, scenarios/heldout.py for a classifier, with
the examples made as scenarios/user_heldout.py says.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.text import Text

from stackcost.errors import SpecError

if TYPE_CHECKING:
    from stackcost.cell import Cell, ModelRef
    from stackcost.data.splits import Split
    from stackcost.quantize import Calibration
    from stackcost.scenarios.user_heldout import Examples, Windows

# The tasks heldout scores on a user's data, and what each reads.
SCORED = {
    "causal-lm": "text",
    "sequence-classification": "labelled text",
    "image-classification": "an image folder",
}
# The flags of a recipe stackcost trains itself, which a checkpoint's own weights make moot.
TRAINING_FLAGS = (
    ("--dataset", "dataset"), ("--data-dir", "data_dir"), ("--epochs", "epochs"),
    ("--train-batch-size", "train_batch_size"), ("--lr", "lr"), ("--optimizer", "optimizer"),
    ("--seed", "seed"), ("-c/--config", "config"),
)  # fmt: skip


@dataclass(frozen=True)
class Checkpoint:
    """The folder as heldout scores it: its reference, config, task and workload."""

    ref: ModelRef
    cfg: Any
    task: str
    workload: Any

    @property
    def decoder(self) -> bool:
        return self.task == "causal-lm"

    @property
    def folder(self) -> str:
        assert self.ref.checkpoint_path is not None
        return self.ref.checkpoint_path

    @cached_property
    def tokenizer(self) -> Any:
        """The folder's own tokenizer, loaded once (SpecError when it does not load)."""
        from stackcost.scenarios.user_heldout import tokenizer_of

        return tokenizer_of(self.folder)


def checked(args: argparse.Namespace) -> Checkpoint:
    """The folder named by args.model; SpecError on any flag or file that does not fit it."""
    from stackcost import zoo
    from stackcost.runspec.run import model_ref
    from stackcost.zoo.hf import checkpoint_config, checkpoint_task, saved_class

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
    ref = model_ref(args.model)
    try:
        workload = zoo.workload_of(ref)
        cfg = checkpoint_config(ref)
        task = checkpoint_task(ref, cfg)
    except zoo.ZooError as exc:
        raise SpecError(str(exc)) from None
    name = task.name if task else "base model"
    if name not in SCORED:
        allowed = "; ".join(f"{t} on {what}" for t, what in SCORED.items())
        raise SpecError(
            f"checkpoint {args.model} is a {name} ({saved_class(cfg)}); heldout scores {allowed}"
        )
    return Checkpoint(ref, cfg, name, workload)


def decoder_inputs(args: argparse.Namespace, ck: Checkpoint, batch: int) -> tuple[Cell, Windows]:
    """The cell a decoder is scored as, and the windows of the user's text."""
    from stackcost.cell import Cell
    from stackcost.data.user import read_corpus
    from stackcost.scenarios.user_heldout import text_windows

    _no_calibration(args, "a causal LM's w8 and w4 need none")
    context = _prompt_len(args, ck.workload)
    windows = text_windows(read_corpus(args.data), ck.tokenizer, context, _limit(args))
    cell = Cell(
        model=ck.ref, backend="eager", mode="generate", batch_size=batch,
        sizes={"prompt_len": context // 2, "new_tokens": context - context // 2},
        threads=int(args.threads),
    )  # fmt: skip
    return cell, windows


@dataclass(frozen=True)
class ClassifierInputs:
    """What a classifier is scored on: its cell, the scored examples as a split, the
    calibration batches, and the words and record that say what they are."""

    cell: Cell
    test: Split
    calibration: Calibration
    dataset: str
    record: dict[str, Any]


def classifier_inputs(
    args: argparse.Namespace, ck: Checkpoint, precisions: list[str], batch: int
) -> ClassifierInputs:
    """The user's labelled examples, split into calibration and scored ones as the flags
    say; SpecError when they do not fit the model."""
    from stackcost.cell import Cell
    from stackcost.scenarios.user_heldout import (
        CALIBRATION_SHARE,
        as_split,
        calibration_batches,
        calibration_split,
    )

    if args.prompt_len is not None:
        raise SpecError(f"--prompt-len applies to a causal LM; {args.model} is a {ck.task}")
    share = _share(args)
    data = _examples(args.data, ck)
    record: dict[str, Any] = {"data": str(Path(args.data).resolve()), "how": data.how}
    if args.calibration is not None:
        calibration_set = _examples(args.calibration, ck)
        scored = data
        source = f"{args.calibration}: all {len(calibration_set)} examples"
    elif "int8" in precisions:
        if len(data) < 2:
            raise SpecError(
                f"--data {args.data}: one example cannot both calibrate int8 and be scored; "
                "give more, or --calibration"
            )
        share = CALIBRATION_SHARE if share is None else share
        calibrate, score = calibration_split(len(data), share)
        calibration_set, scored = data.take(calibrate), data.take(score)
        source = (
            f"{len(calibrate)} of the {len(data)} examples of --data ({share:.0%}, drawn with a "
            "fixed seed), not scored"
        )
    else:
        calibration_set, scored, source = data, data, "none (no static precision asked for)"
    record["calibration"] = source
    limit = _limit(args)
    if limit is not None:
        scored = scored.take(np.arange(min(limit, len(scored))))
    record["scored"] = len(scored)
    cell = Cell(
        model=ck.ref, backend="eager", mode="infer", batch_size=batch,
        sizes=_sizes(scored, ck.task), threads=int(args.threads),
    )  # fmt: skip
    dataset = f"{args.data} ({len(scored)} examples; {data.how}; int8 calibration: {source})"
    return ClassifierInputs(
        cell,
        as_split(scored, str(args.data)),
        calibration_batches(calibration_set, batch, source),
        dataset,
        record,
    )


def _examples(path: str, ck: Checkpoint) -> Examples:
    """The labelled examples at `path` as the classifier is fed them; SpecError (naming
    the file) when they do not fit the model."""
    from stackcost.data.user import read_labelled
    from stackcost.scenarios.user_heldout import (
        image_examples,
        image_settings,
        text_examples,
    )

    folder, cfg, workload = ck.folder, ck.cfg, ck.workload
    id2label = {int(k): str(v) for k, v in cfg.id2label.items()}
    if ck.task == "image-classification":
        size, mean, std, where = image_settings(folder, cfg)
        channels = int(getattr(cfg, "num_channels", 3))
        labelled = read_labelled(
            path, id2label, "image", size=size, mean=mean, std=std, channels=channels
        )
        how = f"{labelled.description}; resized to {size}x{size} (bilinear), normalized by {where}"
        return image_examples(labelled, how)
    import inspect

    import transformers

    labelled = read_labelled(path, id2label, "text")
    maximum = workload.maximum.get("seq_len", 10**9)
    # A pair's segments reach the model only where its forward takes token type ids (BERT).
    from stackcost.zoo.hf import saved_class

    head = getattr(transformers, saved_class(cfg), None)
    takes_types = (
        head is not None and "token_type_ids" in inspect.signature(head.forward).parameters
    )
    return text_examples(labelled, ck.tokenizer, maximum, takes_types, path)


def _sizes(examples: Examples, task: str) -> dict[str, int]:
    first = examples.inputs.tensors[0]
    if task == "image-classification":
        return {"resolution": int(first.shape[-1])}
    return {"seq_len": int(first.shape[1])}


def _prompt_len(args: argparse.Namespace, workload: Any) -> int:
    from stackcost.runspec.grammar import parse_positive_ints
    from stackcost.scenarios.decoder_heldout import window_problem

    context = parse_positive_ints(args.prompt_len or "128", "prompt length")[0]
    maximum = workload.maximum.get("prompt_len")
    if maximum is not None and context + 1 > maximum:
        raise SpecError(
            f"--prompt-len {context}: a window of {context + 1} tokens is more than "
            f"{args.model}'s {maximum} positions"
        )
    if problem := window_problem(context):
        raise SpecError(problem)
    return context


def _limit(args: argparse.Namespace) -> int | None:
    from stackcost.runspec.grammar import parse_positive_ints

    return None if args.limit is None else parse_positive_ints(args.limit, "limit")[0]


def _share(args: argparse.Namespace) -> float | None:
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


def _no_calibration(args: argparse.Namespace, why: str) -> None:
    for flag, value in (("--calibration", args.calibration),
                        ("--calibration-share", args.calibration_share)):  # fmt: skip
        if value is not None:
            raise SpecError(f"{flag} does not apply to {args.model}: {why}")


def started(args: argparse.Namespace) -> Any:
    err = Console(stderr=True)

    def started(backend: str, precision: str) -> None:
        if not args.quiet:
            err.print(Text(f"evaluating {backend} {precision} on your examples…"))

    return started
