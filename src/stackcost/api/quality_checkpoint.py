"""Held-out quality of a user's own checkpoint folder (hf:./folder), scored on the user's
own examples on each rung and precision.

Everything the user gives is checked before anything runs or is stored: the folder (its
files, config, weights and tokenizer), its task (a causal LM is scored on text, a sequence
or image classifier on labelled examples), the data and the calibration set (read whole,
each example within the model's positions). The scoring itself is the trained recipes'
(`stackcost.api.quality`): scenarios/decoder_heldout.py for a decoder, scenarios/heldout.py
for a classifier, with the examples made as scenarios/user_heldout.py says.

    result = heldout_checkpoint("hf:./my-model", "test.csv", precisions=["fp32", "int8"])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.api.quality import OnStart, QualityResult, check_store, default_threads, scoring
from stackcost.errors import SpecError

if TYPE_CHECKING:
    from stackcost.cell import Cell, ModelRef
    from stackcost.data.splits import Split
    from stackcost.quantize import Calibration
    from stackcost.scenarios.user_heldout import Examples, Windows

__all__ = [
    "SCORED",
    "Checkpoint",
    "CheckpointInputs",
    "check_applies",
    "classifier_inputs",
    "decoder_inputs",
    "heldout_checkpoint",
    "is_checkpoint",
    "open_checkpoint",
]

# The tasks heldout scores on a user's data, and what each reads.
SCORED = {
    "causal-lm": "text",
    "sequence-classification": "labelled text",
    "image-classification": "an image folder",
}
PROMPT_LEN = 128  # a decoder's windows, in tokens, unless told


def is_checkpoint(model: str) -> bool:
    """Whether `model` names a checkpoint folder (hf:./folder, hf:/abs/folder), rather
    than a model stackcost trains itself."""
    from stackcost.zoo.checkpoint import is_checkpoint_name

    return model.startswith("hf:") and is_checkpoint_name(model.removeprefix("hf:"))


@dataclass(frozen=True)
class Checkpoint:
    """The folder as heldout scores it: the name it was given by, its reference, config,
    task and workload."""

    name: str
    ref: ModelRef
    cfg: Any
    task: str
    workload: Any

    @property
    def decoder(self) -> bool:
        """Whether it is a causal LM, scored on text."""
        return self.task == "causal-lm"

    @property
    def folder(self) -> str:
        """The folder's absolute path."""
        assert self.ref.checkpoint_path is not None
        return self.ref.checkpoint_path

    @cached_property
    def tokenizer(self) -> Any:
        """The folder's own tokenizer, loaded once (SpecError when it does not load)."""
        from stackcost.scenarios.user_heldout import tokenizer_of

        return tokenizer_of(self.folder)


def open_checkpoint(model: str) -> Checkpoint:
    """The checkpoint folder `model` names (hf:./folder), with a task heldout scores;
    SpecError for a folder that does not load or a head it does not score."""
    from stackcost import zoo
    from stackcost.runspec.run import model_ref
    from stackcost.zoo.hf import checkpoint_config, checkpoint_task, saved_class

    ref = model_ref(model)
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
            f"checkpoint {model} is a {name} ({saved_class(cfg)}); heldout scores {allowed}"
        )
    return Checkpoint(model, ref, cfg, name, workload)


def check_applies(
    ck: Checkpoint,
    *,
    calibration: object = None,
    calibration_share: object = None,
    prompt_len: object = None,
) -> None:
    """What was given must fit the task: a calibration set or share only a classifier's
    int8 (a causal LM's w8 and w4 need none), a window length only a causal LM. Only
    whether each is given (not None) counts here."""
    if ck.decoder:
        for flag, value in (("--calibration", calibration),
                            ("--calibration-share", calibration_share)):  # fmt: skip
            if value is not None:
                raise SpecError(
                    f"{flag} does not apply to {ck.name}: a causal LM's w8 and w4 need none"
                )
    elif prompt_len is not None:
        raise SpecError(f"--prompt-len applies to a causal LM; {ck.name} is a {ck.task}")


@dataclass(frozen=True)
class CheckpointInputs:
    """What a checkpoint is scored on: the cell it is scored as, the words and the record
    that say what its examples are, and the examples: a decoder's token `windows`, or a
    classifier's scored examples (`test`, as a split) and `calibration` batches."""

    cell: Cell
    dataset: str
    record: dict[str, Any]
    windows: Windows | None = None
    test: Split | None = None
    calibration: Calibration | None = None


def decoder_inputs(
    ck: Checkpoint,
    data: str | Path,
    *,
    prompt_len: int | None = None,
    limit: int | None = None,
    batch_size: int = 16,
    threads: int | None = None,
) -> CheckpointInputs:
    """The windows of `prompt_len` tokens (default 128) the user's text at `data` makes
    (at most `limit`), and the cell the decoder is scored as; SpecError when a window does
    not fit the model's positions or the text makes none."""
    from stackcost.cell import Cell
    from stackcost.data.user import read_corpus
    from stackcost.scenarios.user_heldout import text_windows

    context = _prompt_len(ck, PROMPT_LEN if prompt_len is None else prompt_len)
    windows = text_windows(read_corpus(str(data)), ck.tokenizer, context, limit)
    cell = Cell(
        model=ck.ref, backend="eager", mode="generate", batch_size=batch_size,
        sizes={"prompt_len": context // 2, "new_tokens": context - context // 2},
        threads=threads or default_threads(),
    )  # fmt: skip
    return CheckpointInputs(cell, str(windows.record["data"]), windows.record, windows=windows)


def classifier_inputs(
    ck: Checkpoint,
    data: str | Path,
    *,
    precisions: Sequence[str],
    batch_size: int = 64,
    threads: int | None = None,
    calibration: str | Path | None = None,
    calibration_share: float | None = None,
    limit: int | None = None,
) -> CheckpointInputs:
    """The user's labelled examples at `data`, split into calibration and scored ones:
    all of `calibration` where given, else (when int8 is among `precisions`) a
    `calibration_share` of `data` (default 0.2, drawn with a fixed seed, never scored); at
    most `limit` scored. SpecError when they do not fit the model."""
    import numpy as np

    from stackcost.cell import Cell
    from stackcost.scenarios.user_heldout import (
        CALIBRATION_SHARE,
        as_split,
        calibration_batches,
        calibration_split,
    )

    _check_share(calibration, calibration_share)
    examples = _examples(str(data), ck)
    record: dict[str, Any] = {"data": str(Path(data).resolve()), "how": examples.how}
    if calibration is not None:
        calibration_set = _examples(str(calibration), ck)
        scored = examples
        source = f"{calibration}: all {len(calibration_set)} examples"
    elif "int8" in precisions:
        if len(examples) < 2:
            raise SpecError(
                f"--data {data}: one example cannot both calibrate int8 and be scored; "
                "give more, or --calibration"
            )
        share = CALIBRATION_SHARE if calibration_share is None else calibration_share
        calibrate, score = calibration_split(len(examples), share)
        calibration_set, scored = examples.take(calibrate), examples.take(score)
        source = (
            f"{len(calibrate)} of the {len(examples)} examples of --data ({share:.0%}, drawn "
            "with a fixed seed), not scored"
        )
    else:
        calibration_set, scored, source = examples, examples, "none (no static precision asked for)"
    record["calibration"] = source
    if limit is not None:
        scored = scored.take(np.arange(min(limit, len(scored))))
    record["scored"] = len(scored)
    cell = Cell(
        model=ck.ref, backend="eager", mode="infer", batch_size=batch_size,
        sizes=_sizes(scored, ck.task), threads=threads or default_threads(),
    )  # fmt: skip
    words = f"{data} ({len(scored)} examples; {examples.how}; int8 calibration: {source})"
    return CheckpointInputs(
        cell,
        words,
        record,
        test=as_split(scored, str(data)),
        calibration=calibration_batches(calibration_set, batch_size, source),
    )


def heldout_checkpoint(
    model: str | Checkpoint,
    data: str | Path,
    *,
    backends: Sequence[str] | None = None,
    precisions: Sequence[str] | None = None,
    batch_size: int | None = None,
    calibration: str | Path | None = None,
    calibration_share: float | None = None,
    prompt_len: int | None = None,
    limit: int | None = None,
    threads: int | None = None,
    options: Mapping[str, Mapping[str, str]] | None = None,
    db: str | Path = "stackcost.db",
    command: str = "stackcost.api.quality_checkpoint.heldout_checkpoint()",
    on_start: OnStart | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> QualityResult:
    """Score the checkpoint folder `model` (hf:./folder) on the user's examples at
    `data` on every rung and precision, and store the rows.

    A causal LM is scored on text (a .txt file, a folder of them, or .jsonl with a text
    field), in windows of `prompt_len` tokens, at most `limit` of them; a sequence
    classifier on labelled text (.csv or .jsonl with text [text_pair] and label), an
    image classifier on an image folder (a subfolder per class), at most `limit`
    examples, int8 calibrating on `calibration` or a `calibration_share` of `data`.
    `on_notice` hears what is about to be scored, once the examples are read. Raises
    SpecError on bad input before anything runs or is stored."""
    from stackcost.api.quality import score_decoder, score_examples

    ck = open_checkpoint(model) if isinstance(model, str) else model
    plan = scoring(ck.decoder, backends, precisions, batch_size, options=options, limit=limit)
    check_store(db)
    check_applies(
        ck, calibration=calibration, calibration_share=calibration_share, prompt_len=prompt_len
    )
    if ck.decoder:
        inputs = decoder_inputs(
            ck, data, prompt_len=prompt_len, limit=limit, batch_size=plan.batch_size,
            threads=threads,
        )  # fmt: skip
        windows = inputs.record["windows"]
        _notice(on_notice, f"scoring {ck.name} on {inputs.dataset}: {windows} windows")
        return score_decoder(
            inputs.cell, ck.folder, plan, text=inputs.windows, db=db, command=command,
            on_start=on_start,
        )  # fmt: skip
    inputs = classifier_inputs(
        ck, data, precisions=plan.precisions, batch_size=plan.batch_size, threads=threads,
        calibration=calibration, calibration_share=calibration_share, limit=limit,
    )  # fmt: skip
    _notice(on_notice, f"scoring {ck.name} on {inputs.dataset}")
    assert inputs.test is not None and inputs.calibration is not None
    return score_examples(
        inputs.cell, inputs.test, inputs.calibration, plan, dataset=inputs.dataset,
        data=inputs.record, db=db, command=command, on_start=on_start,
    )  # fmt: skip


def _notice(on_notice: Callable[[str], None] | None, line: str) -> None:
    if on_notice is not None:
        on_notice(line)


def _check_share(calibration: object, share: float | None) -> None:
    """A share of --data calibrates only where no calibration set is given: a fraction."""
    if share is None:
        return
    if calibration is not None:
        raise SpecError("give --calibration or --calibration-share, not both")
    if not 0 < share < 1:
        raise SpecError(
            f"--calibration-share {share!r}: a fraction between 0 and 1 (exclusive), e.g. 0.2"
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


def _prompt_len(ck: Checkpoint, context: int) -> int:
    """A window of `context` tokens and the one it predicts must fit the model's
    positions, and leave a half to score."""
    from stackcost.api.quality import check_window

    maximum = ck.workload.maximum.get("prompt_len")
    if maximum is not None and context + 1 > maximum:
        raise SpecError(
            f"--prompt-len {context}: a window of {context + 1} tokens is more than "
            f"{ck.name}'s {maximum} positions"
        )
    check_window(context)
    return context
