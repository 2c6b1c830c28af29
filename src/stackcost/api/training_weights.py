"""The weights of one training run: the initial weights every repetition starts from,
and the eager rung's trained weights, kept by their recipe.

The initial weights are built once (seeded, explicit init) and saved in the run's scratch
directory, so every backend trains from the same bytes; a killed run's scratch directory
is cleaned by the next run. The eager rung saves its trained weights there too, and they
are filed in the artifact cache under their recipe once the run is over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.errors import SpecError
from stackcost.outputs import check_output_dir
from stackcost.runspec.run import db_problem
from stackcost.scenarios.train import KEPT_CHECKPOINT, KEPT_WEIGHTS, kept_name

if TYPE_CHECKING:
    from stackcost.cell import Cell
    from stackcost.execute.runner import Prepared
    from stackcost.runspec.train import TrainSpec
    from stackcost.scenarios.task import TrainTask


@dataclass(frozen=True)
class RunWeights:
    """A training run's initial weights (`path`, `digest`) in its scratch `directory`, and
    where the eager rung's trained weights go: `kept` is that rung's cell (None when the
    run has no eager rung), `keep_root` the artifact cache (None: not kept)."""

    spec: TrainSpec
    directory: Path
    path: str
    digest: str
    kept: Cell | None
    keep_root: Path | None

    @property
    def trained(self) -> Path:
        """Where the worker saves the eager rung's trained weights, in the scratch
        directory; they are filed under their recipe once the run is over."""
        return self.directory / (kept_name(self.kept) if self.kept is not None else KEPT_WEIGHTS)

    def make_task(self, cell: Cell, rep: int, workdir: str) -> TrainTask:
        """One repetition's task: it loads the initial weights, and the eager rung's first
        repetition saves its trained weights when they are to be kept."""
        from stackcost.scenarios.task import TrainTask

        keep = self.keep_root is not None and rep == 0
        keep = keep and self.kept is not None and cell.key() == self.kept.key()
        return TrainTask(
            cell=cell,
            repetition=rep,
            timeout_s=self.spec.timeout_s,
            workdir=workdir,
            weights_path=self.path,
            weights_digest=self.digest,
            data_dir=self.spec.data_dir,
            keep_weights=str(self.trained) if keep else None,
        )

    def keep(self, on_notice: Callable[[str], None]) -> Path | None:
        """File the trained weights under their recipe when they are to be kept (None
        otherwise); `on_notice` is told where they went, or why none were kept."""
        if self.keep_root is None or self.kept is None:
            return None
        return file_weights(self.keep_root, self.kept, self.trained, on_notice)


@contextmanager
def run_weights(
    prepared: Prepared,
    *,
    db: str | Path,
    keep_weights: str | Path | None = None,
    resume: bool = False,
) -> Iterator[RunWeights]:
    """Save the run's initial weights in a fresh scratch directory, removed on leaving.

    Refused (SpecError) before the weights are built, so bad input costs nothing: a store
    `db` that cannot be written, a `keep_weights` directory that cannot be, and keeping
    weights from a run with no eager rung. With `resume`, the run resumed must have
    trained from these same weights (check_resumable).
    """
    from stackcost.execute import scratch

    spec = prepared.spec
    problem = db_problem(db)
    if problem:
        raise SpecError(problem)
    root = Path(keep_weights) if keep_weights is not None else None
    if root is not None:
        check_output_dir(root, "--keep-weights")
    kept = next((c for c in spec.cells() if c.backend == "eager"), None)
    if root is not None and kept is None:
        raise SpecError("--keep-weights keeps the eager rung's weights: add eager to --backends")
    directory = scratch.make()  # a killed run's initial weights are cleaned by the next
    try:
        path, digest = save_initial_weights(spec, directory)
        if resume:
            check_resumable(spec, Path(db), digest)
        yield RunWeights(spec, directory, path, digest, kept, root)
    finally:
        scratch.remove(directory)


def save_initial_weights(spec: TrainSpec, directory: Path) -> tuple[str, str]:
    """Build the model once (seeded, explicit init) and save it: (path, weights digest)."""
    import torch

    from stackcost import zoo

    model = zoo.build_model(spec.model, spec.sizes)
    path = directory / "initial.pt"
    torch.save(model.state_dict(), path)
    return str(path), zoo.weights_digest(model)


def check_resumable(spec: TrainSpec, db: Path, digest: str) -> None:
    """A resumed run continues only if its repetitions started from these same weights
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


def file_weights(
    root: Path, cell: Cell, trained: Path, on_notice: Callable[[str], None]
) -> Path | None:
    """File the weights a worker saved at `trained` in the artifact cache `root` under
    `cell`'s recipe, and say where; a recipe already kept keeps its first weights."""
    import shutil

    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.scenarios.train import weights_recipe

    if not trained.exists():  # diverged, failed, or skipped by --resume
        on_notice("weights not kept: the eager rung saved none in this run")
        return None
    recipe = weights_recipe(cell)

    def make(home: Path) -> dict[str, Any]:
        shutil.move(trained, home / trained.name)
        return {"recipe": recipe}

    home, record = ArtifactCache(root).reuse_or_make(recipe, make)
    state = "already kept" if record["artifact"]["reused"] else "kept"
    kept = home / trained.name
    if trained.name == KEPT_CHECKPOINT:
        on_notice(f"checkpoint {state}: {kept} (measure it: stackcost run hf:{kept} "
                  "--scenario generate)")  # fmt: skip
    else:
        on_notice(f"weights {state}: {kept}")
    return kept
