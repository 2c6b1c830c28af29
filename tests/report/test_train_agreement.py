"""A level's first losses against eager's: per-step tolerances, and what is not compared."""

from __future__ import annotations

from stackcost.cell import Cell, TrainConfig
from stackcost.report.frames.train import STEPS, TOLERANCES, agreement, eager_twin
from stackcost.result import RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.store.runs import CellResult

EAGER_LOSSES = [2.68, 2.49, 2.67, 6.2, 4.3]


def level(backend: str, losses: list[float], threads: int = 1, **details) -> CellResult:
    cell = Cell(
        model=model_ref("resnet18"),
        backend=backend,
        mode="train",
        batch_size=64,
        sizes={"resolution": 32},
        threads=threads,
        train=TrainConfig(),
    )
    rep = RepetitionResult(status="ok", details={"first_losses": losses, **details})
    return CellResult(cell, [rep])


def scaled(factors: list[float]) -> list[float]:
    return [v * f for v, f in zip(EAGER_LOSSES, factors, strict=False)]


def test_rounding_sized_differences_agree_and_later_steps_are_not_judged():
    eager = level("eager", EAGER_LOSSES)
    # Measured on resnet18/digits: ~4e-7, ~6e-4, ~1.5e-2; step 4 is past the judged steps.
    found = agreement(level("jax", scaled([1 + 4e-7, 1 - 6e-4, 1 + 1.5e-2, 1.5])), eager)
    assert found.agrees is True
    assert len(found.diffs) == STEPS == len(TOLERANCES)
    assert found.label().startswith("agrees: at most 1.5e-02 over steps 1-3")


def test_a_wrong_level_differs_at_the_step_that_shows_it():
    eager = level("eager", EAGER_LOSSES)
    # BatchNorm left in inference mode: step 1, a forward on the same weights, is off.
    assert agreement(level("keras", scaled([1.14, 1, 1])), eager).agrees is False
    # Momentum left out: steps 1-2 identical, step 3 off by 25%.
    bad = agreement(level("keras", scaled([1, 1, 1.25])), eager)
    assert bad.agrees is False and bad.label().startswith("DIFFERS: at most 2.5e-01")
    # Step 1 is held to rounding: 1e-3 there is a conversion error, not noise.
    assert agreement(level("tf", scaled([1 + 1e-3, 1, 1])), eager).agrees is False


def test_dropout_missing_eager_or_losses_are_not_compared_and_say_why():
    eager = level("eager", EAGER_LOSSES)
    random = agreement(level("jax", EAGER_LOSSES, stochastic_layers=["Dropout"]), eager)
    assert random.agrees is None and random.stochastic
    assert "Dropout draw per framework" in random.label()
    assert "no eager level" in agreement(level("jax", EAGER_LOSSES), None).label()
    assert "no per-step losses" in agreement(level("onednn", []), eager).label()


def test_the_eager_twin_is_the_same_cell_on_eager():
    cells = [level("eager", EAGER_LOSSES, threads=2), level("eager", EAGER_LOSSES)]
    jax = level("jax", EAGER_LOSSES)
    assert eager_twin(jax, cells) is cells[1]
    assert eager_twin(level("jax", EAGER_LOSSES, threads=4), cells) is None
