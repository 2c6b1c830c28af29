"""The Python API: `stackcost.run(...)` and `stackcost.load(...)`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.env import cores
from stackcost.errors import SpecError
from stackcost.runspec.run import db_problem, model_ref, validate
from stackcost.store.runs import RunResult, load_runs

if TYPE_CHECKING:
    from stackcost.store.merge import Merged

__all__ = ["environment", "load", "load_runs", "merge", "run"]


def run(
    model: str,
    backends: Sequence[str] | None = None,
    *,
    batch_sizes: Sequence[int] = (1,),
    resolutions: Sequence[int] | None = None,
    sizes: dict[str, Sequence[int]] | None = None,  # {"seq_len": [128]}: any size axis
    precisions: Sequence[str] = ("fp32",),
    threads: Sequence[int] | None = None,  # default: every CPU this process may use
    devices: Sequence[str] = ("cpu",),
    repeats: int = 1,
    init: str = "torch-default",
    num_classes: int | None = None,
    in_channels: int | None = None,
    conv_bias: bool = False,
    input_shape: Sequence[int] | None = None,
    db: str | Path = "stackcost.db",
    **spec_fields,
) -> RunResult:
    """Measure `model` through `backends` and return the typed results.

    Raises SpecError on bad input before anything is written.
    >>> stackcost.run("mlp", ["eager", "onnxruntime"], batch_sizes=[1, 8]).to_dataframe()
    """
    from stackcost.execute.runner import execute, prepare
    from stackcost.store.database import Store

    ref = model_ref(
        model,
        init=init,
        num_classes=num_classes,
        in_channels=in_channels,
        conv_bias=conv_bias,
        input_shape=tuple(input_shape) if input_shape else None,
    )
    fields = dict(
        models=[ref],
        batch_sizes=list(batch_sizes),
        precisions=list(precisions),
        threads=list(threads) if threads else [cores()],
        devices=list(devices),
        repeats=repeats,
        sizes={
            **{axis: list(v) for axis, v in (sizes or {}).items()},
            **({"resolution": list(resolutions)} if resolutions else {}),
        },
        **spec_fields,
    )
    if backends is not None:
        fields["backends"] = list(backends)
    spec = validate(fields)
    problem = db_problem(db)
    if problem:
        raise SpecError(problem)
    prepared = prepare(spec)  # user code asked once, before the store is created
    with Store(db) as store:
        return execute(prepared, store, command="stackcost.run()")


def load(db: str | Path = "stackcost.db", run_id: str | None = None) -> RunResult:
    """A stored run (the latest when run_id is None)."""
    return load_runs(db, [run_id] if run_id else [])[0]


def merge(stores: Sequence[str | Path], output: str | Path) -> Merged:
    """Add every run of `stores` to the store `output` (created if need be), each run with
    its own environment, so one report compares the machines side by side. The sources
    are only read; a run already in `output` is taken once.

    Raises SpecError (a StoreError) for a source that is not a store or is `output`."""
    from stackcost.store.merge import merge as merge_stores

    return merge_stores([Path(s) for s in stores], Path(output))


def environment() -> dict[str, Any]:
    """The environment record stored with every run: the machine, its CPU and ISA, memory,
    GPUs, and the versions of stackcost and every framework."""
    from stackcost.env import collect

    return collect()
