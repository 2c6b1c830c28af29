"""advise's two best finalists measured side by side: one paired, interleaved A/B
(`stackcost ab`'s machinery), its ratio read on the search's objective, and the same pair
found in an earlier answer to the same request so that it is not measured again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from stackcost.advise.advice import Advice, Comparison

if TYPE_CHECKING:
    from stackcost.advise.evidence import Evidence
    from stackcost.runspec.run import RunSpec


def interleaved(
    spec_of: Callable[[Evidence], RunSpec],
    threshold: float,
    db: str | Path,
    command: str,
    winner: Evidence,
    runner: Evidence,
) -> Comparison:
    """winner (base) and runner-up (candidate), each its one-cell spec (`spec_of`), as one
    paired, interleaved A/B whose gate has `threshold`."""
    from stackcost.api.paired import ab_design, measure_sides, resolve_sides

    specs = {"base": spec_of(winner), "cand": spec_of(runner)}
    design = ab_design(threshold=threshold)
    result = measure_sides(specs, resolve_sides(), design, db, command=command)
    pair = result.cells[0]
    paired = pair.result
    return Comparison(
        pair_id=result.pair_id,
        recommended=winner.label,
        runner_up=runner.label,
        verdict=pair.verdict,
        ratio=paired.ratio if paired else float("nan"),
        ci_low=paired.ci_low if paired else float("nan"),
        ci_high=paired.ci_high if paired else float("nan"),
        design=pair.design,
        blocks=len(pair.estimates),
    )


def earlier_answers(db: str | Path, request: str) -> list[Advice]:
    """The answers stored for this same request (Search.digest), newest first."""
    from stackcost.store.database import Store

    with Store(db) as store:
        rows = store.advice()
    answers = (Advice.model_validate_json(row["advice_json"]) for row in reversed(rows))
    return [a for a in answers if a.request == request]


def earlier_pair(
    db: str | Path, request: str, winner: Evidence, runner: Evidence
) -> Comparison | None:
    """The same two finalists' paired comparison from an earlier answer to this same
    request in the store, so a search asked again does not measure them again."""
    for earlier in earlier_answers(db, request):
        cmp = earlier.comparison
        if cmp is not None and {cmp.recommended, cmp.runner_up} == {winner.label, runner.label}:
            return cmp if cmp.recommended == winner.label else _swapped(cmp)
    return None


def _swapped(cmp: Comparison) -> Comparison:
    return cmp.model_copy(
        update={
            "recommended": cmp.runner_up,
            "runner_up": cmp.recommended,
            "ratio": 1 / cmp.ratio,
            "ci_low": 1 / cmp.ci_high,
            "ci_high": 1 / cmp.ci_low,
            "verdict": {"regressed": "improved", "improved": "regressed"}.get(
                cmp.verdict, cmp.verdict
            ),
        }
    )


def objective_ratio(
    cmp: Comparison, winner: Evidence, runner: Evidence, objective: str
) -> tuple[float, float, float]:
    """How much better the runner-up is than the winner on the objective (above 1:
    better), with its interval: from the pair's step-time ratio runner-up / winner."""
    if cmp.ratio != cmp.ratio:  # no paired result (a side failed): no evidence either way
        return (0.0, 1.0, 2.0)
    if objective == "throughput":
        scale = runner.batch_size / winner.batch_size
        return scale / cmp.ci_high, scale / cmp.ratio, scale / cmp.ci_low
    return 1 / cmp.ci_high, 1 / cmp.ratio, 1 / cmp.ci_low
