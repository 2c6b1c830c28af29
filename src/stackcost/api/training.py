"""Train one model on one dataset through each backend, from the same initial weights.

`train` is the whole run for a Python user. `stackcost train` takes the same steps with
its live progress in between: `prepare_training` checks a `TrainingRequest` against the
model and its data and asks user code once, and `run_weights` saves the initial weights
the repetitions start from and keeps the eager rung's trained weights.

>>> from stackcost.api.training import train
>>> result = train("mlp", backends=["eager", "inductor"], epochs=2, limit=256, threads=[1])
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.api.training_model import (
    check_before_probe,
    check_fed_images,
    check_full_batch,
    check_vocabulary,
    model_to_train,
    train_sizes,
    trained_model,
    trains_text,
)
from stackcost.api.training_request import OPTIMIZERS, SCHEDULES, TrainingRequest, check_request
from stackcost.api.training_weights import RunWeights, run_weights
from stackcost.execute.probe import TIMEOUT_S as IMPORT_TIMEOUT_S
from stackcost.workload import SIZE_AXES, Workload

if TYPE_CHECKING:
    from stackcost.cell import ModelRef
    from stackcost.execute.runner import Prepared
    from stackcost.runspec.train import TrainSpec
    from stackcost.store.runs import RunResult

__all__ = [
    "IMPORT_TIMEOUT_S",
    "OPTIMIZERS",
    "SCHEDULES",
    "SIZE_AXES",
    "RunWeights",
    "TrainingRequest",
    "default_threads",
    "prepare_training",
    "run_weights",
    "train",
    "trains_text",
]


def default_threads() -> int:
    """The intra-op threads a training run uses unless told: every CPU this process may
    use."""
    from stackcost.env import cores

    return cores()


def prepare_training(
    request: TrainingRequest, *, import_timeout_s: float = IMPORT_TIMEOUT_S
) -> Prepared:
    """The request as a validated TrainSpec, prepared to run.

    Every bad input raises SpecError before any store exists. The model and the custom
    backends are asked about in one child at most (its import bounded by
    `import_timeout_s`), whose answers the run takes as they are instead of asking again.
    """
    import os

    from stackcost.execute.environ import worker_environ
    from stackcost.execute.probe import ask
    from stackcost.execute.runner import prepare
    from stackcost.runspec.train import check_backend_names, check_backends, check_data

    check_request(request)
    backends = list(request.backends)
    check_backend_names(backends)
    check_before_probe(request)
    asked = model_to_train(request)
    environ = worker_environ(os.environ, {}, list(request.inherit_env))
    answers = ask([asked], {name: {} for name in backends}, environ, import_timeout_s)
    model, workload = trained_model(request, asked, answers.workloads)
    dataset = check_fed_images(request.model, workload, request.dataset)
    check_data(dataset, request.data_dir)
    check_vocabulary(dataset, workload)
    check_backends(backends, facts=answers.facts)
    spec = _train_spec(request, model, workload, dataset)
    check_full_batch(spec)
    return prepare(spec, answers)


def _train_spec(
    request: TrainingRequest, model: ModelRef, workload: Workload, dataset: str
) -> TrainSpec:
    """The TrainSpec of a request whose model (its ModelRef and workload, as the probe
    answered) and dataset are settled."""
    from stackcost.cell import TrainConfig
    from stackcost.data import DATASETS
    from stackcost.runspec.train import TrainSpec

    return TrainSpec(
        model=model,
        backends=list(request.backends),
        train=TrainConfig(
            dataset=dataset,
            epochs=request.epochs,
            lr=request.lr,
            optimizer=request.optimizer,  # type: ignore[arg-type]
            momentum=request.momentum,
            schedule=request.schedule,  # type: ignore[arg-type]
            limit=request.limit,
            data_seed=request.seed,
            pageable=request.pageable,
        ),
        batch_size=request.batch_size,
        sizes=train_sizes(request, workload, DATASETS[dataset]),
        threads=list(request.threads or [default_threads()]),
        devices=list(request.devices),
        repeats=request.repeats,
        timeout_s=request.timeout_s,
        data_dir=str(Path(request.data_dir).resolve()) if request.data_dir else None,
        inherit_env=list(request.inherit_env),
    )


def train(
    request: TrainingRequest | str,
    *,
    db: str | Path = "stackcost.db",
    keep_weights: str | Path | None = None,
    resume: bool = False,
    import_timeout_s: float = IMPORT_TIMEOUT_S,
    on_start: Callable[..., None] | None = None,
    on_result: Callable[..., None] | None = None,
    on_notice: Callable[[str], None] | None = None,
    **fields: Any,
) -> RunResult:
    """Train a model through each backend into the store `db` and return the typed results.

    `request`: a TrainingRequest, or the model's name with the request's other fields as
    keywords (`backends`, `dataset`, `epochs`, `batch_size`, `lr`, `limit`, `threads`,
    ...). `keep_weights`: an artifact cache directory where the eager rung's trained
    weights are kept under their recipe (model, sizes, batch, training config).
    `resume`: continue the latest run of this same request in this environment, training
    only the repetitions it lacks. `on_start` and `on_result` see each repetition begin
    and end; `on_notice` is told where kept weights went.

    Raises SpecError on bad input before anything is written.
    """
    from stackcost.execute.runner import execute
    from stackcost.store.database import Store

    if isinstance(request, str):
        request = TrainingRequest(model=request, **fields)
    elif fields:
        raise TypeError(f"train() got a TrainingRequest and fields too: {', '.join(fields)}")
    prepared = prepare_training(request, import_timeout_s=import_timeout_s)
    with run_weights(prepared, db=db, keep_weights=keep_weights, resume=resume) as weights:
        with Store(db) as store:
            result = execute(
                prepared,
                store,
                command="stackcost.api.training.train()",
                resume=resume,
                on_start=on_start,
                on_result=on_result,
                make_task=weights.make_task,
            )
        weights.keep(on_notice or (lambda line: None))
    return result
