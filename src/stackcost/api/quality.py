"""Held-out quality: what each rung and precision costs in accuracy (a classifier) or in
perplexity (a decoder) against fp32, on examples the weights never trained on.

`heldout` trains a model's recipe (eager only) unless its weights are kept already, then
scores them; `score_recipe` scores the weights `stackcost train --keep-weights` kept for a
recipe (`kept_weights` finds them); `stackcost.api.quality_checkpoint` scores a user's own
checkpoint folder on the user's own examples. Either way eager fp32 is
scored first, the reference every row is compared with, and fp32 on every rung, each
quantized precision's baseline. Every judged row is stored as soon as it is judged, under
a run of its own, which the report's Pareto figure reads for timing cells of the same
weights.

    result = heldout("mlp", precisions=["fp32", "int8"], weights_dir="weights")
    [(r.backend, r.precision, r.status, r.drop_pt) for r in result.rows]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.axes import QUANTIZED
from stackcost.errors import SpecError

if TYPE_CHECKING:
    from stackcost.api.training import TrainingRequest
    from stackcost.cell import Cell, ModelRef
    from stackcost.data.splits import Split
    from stackcost.quantize import Calibration
    from stackcost.scenarios.user_heldout import Windows

__all__ = [
    "CLASSIFIER",
    "DECODER",
    "DEFAULT_WEIGHTS",
    "Defaults",
    "QualityResult",
    "Scoring",
    "check_backends",
    "check_limit",
    "check_options",
    "check_store",
    "check_window",
    "default_threads",
    "defaults",
    "heldout",
    "kept_weights",
    "score_decoder",
    "score_examples",
    "score_recipe",
    "scoring",
    "trains_text",
]

DEFAULT_WEIGHTS = Path.home() / ".cache" / "stackcost" / "weights"
# Called as each rung and precision starts being scored: (backend, precision).
OnStart = Callable[[str, str], None]


@dataclass(frozen=True)
class Defaults:
    """What is scored when not said: the rungs, the precisions (also the only ones
    allowed), and the batch each rung is built for and evaluated in."""

    backends: tuple[str, ...]
    precisions: tuple[str, ...]
    batch_size: int


# A classifier: every rung that infers, at every precision.
CLASSIFIER = Defaults(
    ("eager", "inductor", "export-aot", "onnxruntime", "openvino"), ("fp32", *QUANTIZED), 64
)
# A decoder trained on text: the rungs that generate, at the precisions they generate at;
# 16 windows a batch, within onnxruntime-genai's 32.
DECODER = Defaults(
    ("eager", "inductor", "onnxruntime", "openvino", "llama.cpp"), ("fp32", "w8", "w4"), 16
)


def default_threads() -> int:
    """The intra-op threads a model is scored with unless told: every CPU this process
    may use."""
    from stackcost.env import cores

    return cores()


def defaults(decoder: bool) -> Defaults:
    """A decoder's defaults (a causal LM scored on text), or a classifier's."""
    return DECODER if decoder else CLASSIFIER


@dataclass(frozen=True)
class Scoring:
    """What heldout scores, checked (`scoring` makes one): the rungs, the precisions (fp32
    always runs too, as each rung's baseline), the batch, the training-split samples a
    static precision calibrates on, and a decoder's per-rung options."""

    backends: list[str]
    precisions: list[str]
    batch_size: int
    calibration_samples: int = 256
    options: dict[str, dict[str, str]] | None = None


@dataclass(frozen=True)
class QualityResult:
    """The rows heldout judged, and where they were stored.

    `rows`: a classifier's `scenarios.heldout.Heldout` (accuracy, top-1 agreement with eager
    fp32, the drop in points, each with its interval) or a decoder's
    `scenarios.decoder_heldout.DecoderHeldout` (perplexity, its increase, KL against eager
    fp32), each with its status: ok, undecided, wrong, unsupported, unavailable or failed."""

    cell: Cell  # what the model was scored as: its reference, sizes, batch and threads
    weights: Path  # the state_dict file, or the checkpoint folder
    rows: list[Any]
    decoder: bool
    dataset: str  # a classifier's: what its rows were scored on; "" for a decoder
    data: dict[str, Any] | None  # the user's own examples: what they were, how they were fed
    db: str
    run_id: str | None  # the run the rows are stored under; None when there was no row
    stored: int

    @property
    def failed(self) -> bool:
        """Whether a row is wrong (outside its precision's rule) or failed."""
        return any(r.status in ("wrong", "failed") for r in self.rows)


# -- checks: each raises SpecError before anything runs or is stored -----------------------


def check_backends(backends: Sequence[str], decoder: bool) -> None:
    """A name neither registered nor module:Class is refused, and for a decoder a rung
    that does not generate: its held-out text is scored by the rungs that generate."""
    from stackcost.backends import check_name, is_import_path, load_backend

    for name in backends:
        check_name(name)
    if decoder:
        mute = [b for b in backends if not is_import_path(b) and load_backend(b).generator is None]
        if mute:
            raise SpecError(
                f"--backends {','.join(mute)}: a decoder's held-out text is scored by the "
                f"rungs that generate ({','.join(DECODER.backends)})"
            )


def check_window(prompt_len: int) -> None:
    """A decoder's windows of `prompt_len` tokens must leave a half to score."""
    from stackcost.scenarios.decoder_heldout import window_problem

    if problem := window_problem(prompt_len):
        raise SpecError(problem)


def check_limit(batch_size: int, limit: int | None) -> None:
    """A static precision calibrates on full batches of the `limit` samples kept."""
    if limit is not None and batch_size > limit:
        raise SpecError(
            f"--batch-size {batch_size} is more than the {limit} training samples --limit "
            "keeps: no full batch to calibrate on"
        )


def check_options(
    options: Mapping[str, Mapping[str, str]], backends: Sequence[str], decoder: bool
) -> None:
    """Per-rung options apply to a decoder's rungs (an image model's are built as a timing
    cell's defaults), each to a rung being scored, with values the rung takes."""
    from stackcost.backends import is_import_path, load_backend

    if options and not decoder:
        raise SpecError("--option applies to a decoder's rungs (an image model's use defaults)")
    for name, given in options.items():
        if name not in backends:
            raise SpecError(f"--option given for backend {name!r}, which is not being scored")
        if not is_import_path(name) and (problem := load_backend(name).check_options(given)):
            raise SpecError(problem)


def check_store(db: str | Path) -> None:
    """The store the rows go to must be one this version can write (or a new file)."""
    from stackcost.store.database import check_writable

    if problem := check_writable(Path(db)):
        raise SpecError(f"--db: {problem}")


def scoring(
    decoder: bool,
    backends: Sequence[str] | None = None,
    precisions: Sequence[str] | None = None,
    batch_size: int | None = None,
    calibration_samples: int = 256,
    options: Mapping[str, Mapping[str, str]] | None = None,
    limit: int | None = None,
) -> Scoring:
    """What to score, checked: `defaults(decoder)` for what is not given. `limit`: the
    samples (or a checkpoint's examples) kept, which must hold a full batch."""
    given = defaults(decoder)
    chosen = list(backends or given.backends)
    check_backends(chosen, decoder)
    asked = list(precisions or given.precisions)
    if unknown := [p for p in asked if p not in given.precisions]:
        raise SpecError(
            f"unknown precision {unknown[0]!r} (allowed: {', '.join(given.precisions)})"
        )
    batch = given.batch_size if batch_size is None else batch_size
    for value, what in ((batch, "batch size"), (calibration_samples, "calibration samples")):
        if value < 1:
            raise SpecError(f"{what} {value} must be a positive integer (>= 1)")
    check_limit(batch, limit)
    rungs = {name: dict(values) for name, values in (options or {}).items()}
    check_options(rungs, chosen, decoder)
    return Scoring(chosen, asked, batch, calibration_samples, rungs)


# -- a training recipe's kept weights ------------------------------------------------------


def trains_text(recipe: Cell) -> bool:
    """Whether the recipe trains a causal LM on text (its weights are a checkpoint folder,
    scored as a decoder), rather than a classifier."""
    from stackcost.data import DATASETS

    return recipe.train is not None and DATASETS[recipe.train.dataset].fed == "text"


def kept_weights(weights_dir: str | Path, recipe: Cell) -> Path | None:
    """The weights `stackcost train --keep-weights weights_dir` kept for this recipe (a
    training cell: its model, sizes, batch and training config), or None."""
    from stackcost.scenarios.train import kept_weights as kept

    return kept(Path(weights_dir), recipe)


def _recipe(model: str | TrainingRequest) -> tuple[TrainingRequest, Cell]:
    """The training request (eager only: its weights are the ones kept) and its cell."""
    from dataclasses import replace

    from stackcost.api.training import TrainingRequest, prepare_training

    request = TrainingRequest(model=model) if isinstance(model, str) else model
    request = replace(request, backends=("eager",))
    prepared = prepare_training(request)
    return request, next(c for c in prepared.spec.cells() if c.backend == "eager")


def recipe_weights(
    model: str | TrainingRequest,
    *,
    weights_dir: str | Path = DEFAULT_WEIGHTS,
    db: str | Path = "stackcost.db",
    on_notice: Callable[[str], None] | None = None,
) -> Path:
    """The weights `model`'s recipe trained, kept in `weights_dir`: found, or trained now
    (eager; the run stored in `db`). RuntimeError when training keeps none."""
    request, recipe = _recipe(model)
    return _kept_or_trained(request, recipe, weights_dir, db, on_notice)


def _kept_or_trained(
    request: TrainingRequest,
    recipe: Cell,
    weights_dir: str | Path,
    db: str | Path,
    on_notice: Callable[[str], None] | None,
) -> Path:
    from stackcost.api.training import train

    notice = on_notice or (lambda line: None)
    weights = kept_weights(weights_dir, recipe)
    if weights is None:
        assert recipe.train is not None
        notice(
            f"training {request.model} on {recipe.train.dataset} ({recipe.train.epochs} epochs, "
            f"eager): no weights kept for this recipe in {weights_dir} yet"
        )
        train(request, db=db, keep_weights=weights_dir, on_notice=notice)
        weights = kept_weights(weights_dir, recipe)
        if weights is None:  # diverged or failed: its run in the store says which
            raise RuntimeError(f"training {request.model} kept no weights: nothing to evaluate")
    else:
        notice(f"trained weights kept for this recipe: {weights}")
    return weights


def heldout(
    model: str | TrainingRequest,
    *,
    weights_dir: str | Path = DEFAULT_WEIGHTS,
    backends: Sequence[str] | None = None,
    precisions: Sequence[str] | None = None,
    batch_size: int | None = None,
    calibration_samples: int = 256,
    options: Mapping[str, Mapping[str, str]] | None = None,
    db: str | Path = "stackcost.db",
    command: str = "stackcost.api.quality.heldout()",
    on_start: OnStart | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> QualityResult:
    """Train `model` (eager only) unless its recipe's weights are kept in `weights_dir`
    already, then score them on the held-out split on every rung and precision, and store
    the rows (the training run too, in the same store `db`).

    `model`: a model `stackcost.api.training.train` takes, trained with that API's
    defaults, or a TrainingRequest that says the recipe (dataset, epochs, limit, ...; its
    backends are ignored: the eager rung's weights are the ones kept). The rest is as
    `score_recipe` takes it; `on_notice` hears whether weights were found or trained.
    Raises SpecError on bad input before anything is trained or stored, RuntimeError
    when training keeps no weights (its run in the store says why).

    >>> result = heldout("mlp", precisions=["fp32", "int8"], weights_dir="weights")
    """
    request, recipe = _recipe(model)
    _recipe_scoring(recipe, backends, precisions, batch_size, calibration_samples, options, db)
    weights = _kept_or_trained(request, recipe, weights_dir, db, on_notice)
    return score_recipe(
        recipe, weights, weights_dir=weights_dir, backends=backends, precisions=precisions,
        batch_size=batch_size, calibration_samples=calibration_samples, options=options,
        data_dir=request.data_dir, db=db, command=command, on_start=on_start,
    )  # fmt: skip


def score_recipe(
    recipe: Cell,
    weights: str | Path | None = None,
    *,
    weights_dir: str | Path = DEFAULT_WEIGHTS,
    backends: Sequence[str] | None = None,
    precisions: Sequence[str] | None = None,
    batch_size: int | None = None,
    calibration_samples: int = 256,
    options: Mapping[str, Mapping[str, str]] | None = None,
    data_dir: str | None = None,
    db: str | Path = "stackcost.db",
    command: str = "stackcost.api.quality.score_recipe()",
    on_start: OnStart | None = None,
) -> QualityResult:
    """Score a training recipe's trained weights on its dataset's held-out split, on
    every rung and precision, and store the rows.

    `recipe` is the eager cell of a training spec; `weights` its trained state_dict (or,
    for a causal LM trained on text, its checkpoint folder), by default the ones kept for
    it in `weights_dir`. A classifier is scored on the test split (a static precision
    calibrating on `calibration_samples` of the training split, read from `data_dir`); a
    decoder on the held-out stdlib-text windows, with `options` per rung. Raises SpecError
    on bad input, or when no weights are kept for the recipe, before anything is stored.
    """
    plan = _recipe_scoring(
        recipe, backends, precisions, batch_size, calibration_samples, options, db
    )
    if weights is None:
        weights = kept_weights(weights_dir, recipe)
        if weights is None:
            raise SpecError(
                f"no weights kept for this recipe in {weights_dir}: train them first "
                f"(stackcost train --backends eager --keep-weights {weights_dir})"
            )
    _threads(recipe)
    if trains_text(recipe):
        return score_decoder(recipe, weights, plan, db=db, command=command, on_start=on_start)
    from stackcost.execute import scratch
    from stackcost.scenarios.heldout import evaluate

    workdir = scratch.make()
    try:
        rows = evaluate(
            recipe, Path(weights), plan.backends, plan.precisions, plan.batch_size, workdir,
            data_dir, plan.calibration_samples, on_start,
        )  # fmt: skip
    finally:
        scratch.remove(workdir)
    stored = _Stored(db, recipe, Path(weights), recipe.model, "accuracy_drop_pt", None, command)
    for row in rows:
        stored.add(row.record(), row.drop_pt)
    dataset = recipe.train.dataset if recipe.train else ""
    return stored.result(rows, decoder=False, dataset=dataset)


def _recipe_scoring(
    recipe: Cell,
    backends: Sequence[str] | None,
    precisions: Sequence[str] | None,
    batch_size: int | None,
    calibration_samples: int,
    options: Mapping[str, Mapping[str, str]] | None,
    db: str | Path,
) -> Scoring:
    """What to score of `recipe`'s weights, checked against the recipe (its windows, the
    samples its --limit keeps) and the store, before anything is trained or stored."""
    decoder = trains_text(recipe)
    limit = recipe.train.limit if recipe.train is not None else None
    plan = scoring(decoder, backends, precisions, batch_size, calibration_samples, options, limit)
    if decoder and "prompt_len" in recipe.sizes:
        check_window(recipe.sizes["prompt_len"])
    check_store(db)
    return plan


# -- scoring, as heldout and quality_checkpoint do it ------------------------------------


def score_examples(
    cell: Cell,
    test: Split,
    calibration: Calibration,
    plan: Scoring,
    *,
    dataset: str,
    data: dict[str, Any] | None = None,
    db: str | Path = "stackcost.db",
    command: str = "stackcost.api.quality.score_examples()",
    on_start: OnStart | None = None,
) -> QualityResult:
    """Score the classifier `cell` names, with the weights it is built with (a
    checkpoint's own), on the labelled examples `test`, a static precision calibrating on
    `calibration`; store the rows. `dataset` says in words what they are, `data` is the
    record stored with the run."""
    from stackcost.execute import scratch
    from stackcost.scenarios.heldout import evaluate_split

    _threads(cell)
    workdir = scratch.make()
    try:
        rows = evaluate_split(
            cell, None, test, calibration, plan.backends, plan.precisions, plan.batch_size,
            workdir, on_start,
        )  # fmt: skip
    finally:
        scratch.remove(workdir)
    assert cell.model.checkpoint_path is not None
    folder = Path(cell.model.checkpoint_path)
    stored = _Stored(db, cell, folder, cell.model, "accuracy_drop_pt", data, command)
    for row in rows:
        stored.add(row.record(), row.drop_pt)
    return stored.result(rows, decoder=False, dataset=dataset)


def score_decoder(
    cell: Cell,
    checkpoint: str | Path,
    plan: Scoring,
    *,
    text: Windows | None = None,
    db: str | Path = "stackcost.db",
    command: str = "stackcost.api.quality.score_decoder()",
    on_start: OnStart | None = None,
) -> QualityResult:
    """Score the decoder in the checkpoint folder (trained by `cell`'s recipe, or the
    cell a user's checkpoint is scored as) on the held-out text, through every generating
    rung and precision: the recipe's held-out windows, or the user's own `text`. Each row
    is stored as soon as it is scored."""
    from stackcost.execute import scratch
    from stackcost.runspec.run import model_ref
    from stackcost.scenarios.decoder_heldout import evaluate

    _threads(cell)
    checkpoint = Path(checkpoint)
    # As a timing cell of this checkpoint names it: hf:/abs/path and its files' sha256.
    ref = model_ref(f"hf:{checkpoint}")
    data = text.record if text is not None else None
    stored = _Stored(db, cell, checkpoint, ref, "ppl_increase_pct", data, command)
    workdir = scratch.make()
    try:
        rows = evaluate(
            cell,
            ref,
            plan.backends,
            plan.precisions,
            plan.batch_size,
            workdir,
            on_start,
            lambda r: stored.add(r.record(), r.ppl_increase_pct, r.options),
            plan.options,
            (text.ids, text.labels, text.half) if text is not None else None,
        )
    finally:
        scratch.remove(workdir)
    return stored.result(rows, decoder=True, dataset="")


def _threads(cell: Cell) -> None:
    """Torch's intra-op pool at the cell's threads, as the rungs are evaluated in this
    process. Imported only here: a refusal is not kept waiting on torch."""
    import torch

    torch.set_num_threads(cell.threads)


class _Stored:
    """The held-out rows of one heldout in the store, under a run of their own (its
    command, recipe, the user's data where given, and environment): a row is committed as
    soon as it is judged, and the report's Pareto figure reads it for timing cells of the
    same weights (store/heldout.py)."""

    def __init__(
        self,
        db: str | Path,
        cell: Cell,
        weights: Path,
        model: ModelRef,
        metric: str,
        data: dict[str, Any] | None,
        command: str,
    ) -> None:
        from stackcost.env import collect
        from stackcost.store.database import HELDOUT_KIND
        from stackcost.store.heldout import identity

        self.db, self.metric, self.cell, self.weights = str(db), metric, cell, weights
        self.model, self.identity = model.name, identity(model)
        self.data = data
        self.spec = {
            "kind": HELDOUT_KIND,
            "model": model.model_dump(mode="json"),
            "weights": str(weights),
            "recipe": cell.model_dump(mode="json"),
            "metric": metric,
            # A checkpoint's own examples: what they were and how they were fed.
            **({"data": data} if data else {}),
        }
        self.env = collect([cell.threads])
        self.command = command
        self.run_id: str | None = None
        self.count = 0

    def add(
        self, record: dict[str, Any], lost: float | None, options: dict[str, str] | None = None
    ) -> None:
        """A row (its record), the quality it lost in this run's metric, and the options
        its rung was built with."""
        from stackcost.store.database import Store

        with Store(self.db) as store:
            if self.run_id is None:  # the run is created with its first row: none is empty
                self.run_id = store.create_run(self.spec, self.env, self.command)
            store.add_heldout(
                self.run_id, self.model, self.identity, self.metric, lost, record, options or {}
            )
            store.finish_run(self.run_id)  # finished as of its latest row
        self.count += 1

    def result(self, rows: list[Any], decoder: bool, dataset: str) -> QualityResult:
        return QualityResult(
            self.cell, self.weights, rows, decoder, dataset, self.data, self.db, self.run_id,
            self.count,
        )  # fmt: skip
