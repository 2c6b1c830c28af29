"""A training run as its views read it (terminal/train.py, html/train.py): its epochs as a
frame, and whether each level trains the same network the same way as eager.

Does a level train the same network the same way as eager? Its first steps' losses say.

Every level starts from the same weights and sees the same batches in the same order, so
step 1's loss is one forward of the same network on the same batch: it differs from
eager's only by fp32 rounding in other kernels. Step 2 adds one update, step 3 the first
with momentum. Later steps are compared by nobody: at the default recipe (SGD, lr 0.05,
momentum 0.9) the early losses jump, and rounding-sized differences grow to percents
within a few steps, alike in every framework.

TOLERANCES, per step, from what was measured (docs/results/training-frameworks.md),
resnet18 on digits at batch 64:
- correct levels: keras and jax against eager, step 1 <= 4e-7, step 2 <= 6e-4 (max
  pooling's gradient between tied maxima is routed differently by TensorFlow), step 3
  <= 1.5e-2;
- the same eager run with one thing wrong: BatchNorm in inference mode moves step 1 by
  0.14; the learning rate 10% high moves step 2 by 0.026 and step 3 by 0.14; momentum
  left out moves step 3 by 0.25.

Models that draw random masks (dropout) in training are not compared: each framework
draws its own, so their losses differ from step 1 by design.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from stackcost.store.runs import CellResult, RunResult

# The largest relative difference from eager's loss that still agrees, per step.
TOLERANCES = (1e-4, 5e-2, 5e-2)
STEPS = len(TOLERANCES)
TOLERANCE_TEXT = "step 1 within 1e-4, steps 2-3 within 5e-2"


@dataclass(frozen=True)
class Agreement:
    """One level's first losses against eager's, from their first repetitions."""

    diffs: tuple[float, ...]  # relative difference per step (up to STEPS)
    why: str = ""  # why there is nothing to compare
    stochastic: bool = False  # not compared: dropout draws differ per framework

    @property
    def max_rel_diff(self) -> float | None:
        return max(self.diffs) if self.diffs else None

    @property
    def agrees(self) -> bool | None:
        if not self.diffs:
            return None
        return all(d <= tol for d, tol in zip(self.diffs, TOLERANCES, strict=False))

    def label(self) -> str:
        if not self.diffs:
            return f"not compared ({self.why})"
        verdict = "agrees" if self.agrees else "DIFFERS"
        steps = f"step{'s' if len(self.diffs) > 1 else ''} 1-{len(self.diffs)}"
        return f"{verdict}: at most {self.max_rel_diff:.1e} over {steps}"


def relative(mine: list[float], reference: list[float]) -> list[float]:
    return [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(mine, reference, strict=False)]


def _recorded(c: CellResult, key: str) -> list:
    """A list the train worker recorded in the first repetition's details ([] if none)."""
    return list(c.repetitions[0].details.get(key) or []) if c.repetitions else []


def first_losses(c: CellResult) -> list[float]:
    return _recorded(c, "first_losses")


def agreement(level: CellResult, eager: CellResult | None) -> Agreement:
    """`level`'s first STEPS losses against `eager`'s (the same cell but the backend)."""
    if eager is None:
        return Agreement((), "no eager level in this run")
    random_layers = _recorded(level, "stochastic_layers") or _recorded(eager, "stochastic_layers")
    if random_layers:
        return Agreement((), f"{', '.join(random_layers)} draw per framework", stochastic=True)
    diffs = relative(first_losses(level)[:STEPS], first_losses(eager)[:STEPS])
    if not diffs:
        return Agreement((), "no per-step losses recorded")
    return Agreement(tuple(diffs))


def eager_twin(level: CellResult, cells: list[CellResult]) -> CellResult | None:
    """The eager cell trained like `level`: same model, sizes, batch, threads, device,
    recipe; None when the run has none."""
    want = level.cell.model_copy(update={"backend": "eager", "backend_options": {}})
    return next((c for c in cells if c.cell == want), None)


def epochs_frame(runs: list[RunResult]) -> pd.DataFrame:
    """One row per (run, training cell, repetition, epoch)."""
    rows = []
    for run in runs:
        for cell, rep in run.records:
            if cell.mode != "train":
                continue
            for e in rep.epochs:
                rows.append(
                    {
                        "run_id": run.run_id,
                        "model": cell.model.name,
                        "backend": cell.backend,
                        "dataset": cell.train.dataset if cell.train else "",
                        "status": rep.status,
                        "repetition": rep.repetition,
                        **e.model_dump(),
                    }
                )
    return pd.DataFrame(rows)
