"""advise's quality bound: which rungs and precisions keep the model's quality within the
user's bound, scored held out only for the quantized precisions that could win.

The scoring is `stackcost heldout`'s (api.quality): a user's checkpoint folder on the
user's own examples (`data`), or a zoo model's training recipe on its held-out split, with
the weights that recipe trained (kept in `weights_dir`; trained first when none are). fp32
on any rung loses nothing to judge: every timed process verifies its outputs against eager
fp32's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stackcost.advise.evidence import Evidence
from stackcost.advise.quality import Quality, judge, lossless
from stackcost.errors import SpecError

__all__ = ["QualityScores", "check_quality"]

Pair = tuple[str, str]  # (rung, precision)
AT_ONCE = 3  # rungs and precisions a held-out run scores at least, when that many are left


def check_quality(model: str, bound: float | None, data: str | None) -> None:
    """What the quality bound needs, checked before anything runs: a checkpoint folder
    needs its examples (`data`); any other model must be one `stackcost heldout` trains."""
    from stackcost.api.quality_checkpoint import is_checkpoint, open_checkpoint

    if bound is None:
        if data:
            raise SpecError("--data is the examples --max-quality-loss is judged on: give both")
        return
    if is_checkpoint(model):
        if not data:
            raise SpecError(
                f"--max-quality-loss on {model} needs --data: the checkpoint's own examples"
            )
        open_checkpoint(model)
        if not Path(data).exists():
            raise SpecError(f"--data {data!r}: no such file or folder")
        return
    if data:
        raise SpecError(f"--data is a checkpoint folder's examples; {model!r} is not one")
    from stackcost.api.training import TrainingRequest, prepare_training

    prepare_training(TrainingRequest(model=model, backends=("eager",)))


def train_first(
    model: str,
    bound: float | None,
    weights_dir: str | Path | None,
    db: str | Path,
    on_notice: Callable[[str], None],
) -> float:
    """With a quality bound on a zoo model, its recipe's weights kept, trained now if none
    are (minutes, once: not the search's to spend). The seconds it took."""
    import time

    from stackcost.api.quality import DEFAULT_WEIGHTS, recipe_weights
    from stackcost.api.quality_checkpoint import is_checkpoint

    if bound is None or is_checkpoint(model):
        return 0.0
    start = time.monotonic()
    recipe_weights(model, weights_dir=weights_dir or DEFAULT_WEIGHTS, db=db, on_notice=on_notice)
    return time.monotonic() - start


@dataclass
class QualityScores:
    """Each rung and precision's verdict against the bound, scored when first asked."""

    model: str
    bound: float
    data: str | None
    weights_dir: str | Path | None
    db: str | Path
    command: str
    on_phase: Callable[[str], None]
    verdicts: dict[Pair, Quality] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)

    def record(self) -> list[dict[str, Any]]:
        """The verdicts as stored in the answer (Advice.quality)."""
        return [asdict(q) for q in self.verdicts.values()]

    def remember(self, stored: list[dict[str, Any]]) -> None:
        """Verdicts an earlier answer to the same request stored: not scored again."""
        for record in stored:
            q = Quality(**record)
            self.verdicts.setdefault((q.backend, q.precision), q)

    def fit(self, ranked: Sequence[Evidence], count: int) -> tuple[list[Evidence], list[Evidence]]:
        """The best `count` of `ranked` (best first) whose quality is within the bound,
        and the better-ranked ones that were out for quality. The next few rungs and
        precisions the walk reaches are scored together (one held-out run's fixed cost:
        its eager fp32 reference and each rung's fp32 baseline)."""
        chosen: list[Evidence] = []
        out: list[Evidence] = []
        for i, e in enumerate(ranked):
            if len(chosen) == count:
                break
            if (e.backend, e.precision) not in self.verdicts:
                ahead = dict.fromkeys((x.backend, x.precision) for x in ranked[i:])
                self.score(list(ahead)[: max(AT_ONCE, 2 * count)])
            (chosen if self.verdicts[(e.backend, e.precision)].within else out).append(e)
        return chosen, out

    def score(self, pairs: Iterable[Pair]) -> None:
        """Score the pairs not scored yet, every quantized one in one held-out run."""
        todo = [p for p in dict.fromkeys(pairs) if p not in self.verdicts]
        for rung, precision in todo:
            if precision == "fp32":
                self.verdicts[(rung, precision)] = lossless(rung)
        quantized = [p for p in todo if p[1] != "fp32"]
        if not quantized:
            return
        scorable = [p for p in quantized if self._scorable(p)]
        if not scorable:
            return
        self.on_phase("quality, held out: " + ", ".join(f"{b} {p}" for b, p in scorable))
        result = self._heldout(
            sorted({b for b, _ in scorable}), sorted({p for _, p in scorable})
        )  # fmt: skip
        if result.run_id:
            self.runs.append(result.run_id)
        for row in result.rows:
            self.verdicts.setdefault(
                (row.backend, row.precision), judge(row, self.bound, result.decoder)
            )
        for rung, precision in scorable:
            self.verdicts.setdefault(
                (rung, precision),
                Quality(rung, precision, "unscored", reason="held out scored no row for it"),
            )

    def _scorable(self, pair: Pair) -> bool:
        """Whether held out scores this rung; a rung it does not is out, with why."""
        from stackcost.api.quality import check_backends
        from stackcost.api.quality_checkpoint import is_checkpoint, open_checkpoint

        decoder = is_checkpoint(self.model) and open_checkpoint(self.model).decoder
        try:
            check_backends([pair[0]], decoder)
        except SpecError as err:
            self.verdicts[pair] = Quality(*pair, "unscored", reason=str(err))
            return False
        return True

    def _heldout(self, backends: list[str], precisions: list[str]):  # -> QualityResult
        from stackcost.api.quality import DEFAULT_WEIGHTS, heldout
        from stackcost.api.quality_checkpoint import heldout_checkpoint, is_checkpoint

        if is_checkpoint(self.model):
            assert self.data is not None
            return heldout_checkpoint(
                self.model, self.data, backends=backends, precisions=precisions, db=self.db,
                command=f"{self.command} [quality]",
            )  # fmt: skip
        return heldout(
            self.model, weights_dir=self.weights_dir or DEFAULT_WEIGHTS, backends=backends,
            precisions=precisions, db=self.db, command=f"{self.command} [quality]",
            on_notice=self.on_phase,
        )  # fmt: skip
