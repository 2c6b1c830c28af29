"""Interleaved A/B: measure a base and a candidate side by side, decide from paired blocks.

Each block runs, for every cell still undecided, four repetitions in the order ABBA or
BAAB (chosen at random per block, seeded): each one its own process, as in `run`. The
block's log ratio of the cell's repetition medians is one paired sample
(measure/paired.py). After each look the cells with a clear verdict stop; the rest go
on until the cap. Both sides are ordinary runs in the store, linked as a pair, and
the pair's verdicts are stored after every block, so an interrupted A/B keeps what it
measured.

Disturbed repetitions are retried as in `run` (--on-disturbed); a block where a side
has no valid repetition gives no ratio for that cell, and the note says how many were
lost. A cell that fails on one side only is `newly failing` or `fixed`, not timed.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stackcost.cell import Cell
from stackcost.execute import scratch
from stackcost.execute.runner import Runner
from stackcost.execute.sides import Side
from stackcost.measure.paired import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_BLOCKS,
    DEFAULT_MIN_BLOCKS,
    DEFAULT_THRESHOLD,
    PairedResult,
    block_log_ratio,
    decide,
)
from stackcost.result import FAILED_STATUSES, VALID_STATUSES, RepetitionResult

ORDERS = (("base", "cand", "cand", "base"), ("cand", "base", "base", "cand"))
# Verdicts a CI gate fails on: a regression, or a cell the candidate broke.
FAILING = ("regressed", "newly failing")
# Verdicts that decide nothing: more blocks or a quieter machine were needed.
UNDECIDED = ("noisy", "undecided")


@dataclass(frozen=True)
class Design:
    """How the A/B is measured and decided (stored with the pair)."""

    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA
    min_blocks: int = DEFAULT_MIN_BLOCKS
    max_blocks: int = DEFAULT_MAX_BLOCKS
    seed: int = 0

    def rule(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "alpha": self.alpha,
            "min_blocks": self.min_blocks,
            "max_blocks": self.max_blocks,
        }


def _latency_ms(r: RepetitionResult) -> float | None:
    """A repetition's latency: its median, or a LoadGen scenario's headline latency."""
    if r.status not in VALID_STATUSES:
        return None
    if r.scenario is not None:
        return r.scenario.latency_ms
    return r.stats.median_ms if r.stats else None


@dataclass
class CellPair:
    """One cell measured on both sides: its values block by block and its verdict."""

    base: Cell
    cand: Cell
    blocks: list[tuple[list[float], list[float]]] = field(default_factory=list)
    lost: int = 0  # blocks with no valid repetition on a side
    failed: dict[str, str] = field(default_factory=dict)  # side -> status: reason
    result: PairedResult | None = None

    @property
    def label(self) -> str:
        return self.cand.label()

    @property
    def verdict(self) -> str:
        if self.failed:
            if set(self.failed) == {"base", "cand"}:
                return "failing"
            return "newly failing" if "cand" in self.failed else "fixed"
        return self.result.verdict if self.result else "undecided"

    @property
    def done(self) -> bool:
        return bool(self.failed) or (self.result is not None and self.result.final)

    @property
    def log_ratios(self) -> list[float]:
        return [block_log_ratio(b, c) for b, c in self.blocks]

    def median_ms(self, side: str) -> float | None:
        values = [v for block in self.blocks for v in block[side == "cand"]]
        return statistics.median(values) if values else None

    def note(self) -> str:
        parts = [f"{side} {why}" for side, why in self.failed.items()]
        if self.lost:
            parts.append(f"{self.lost} block(s) lost to invalid repetitions")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell": self.label,
            "base_key": self.base.key(),
            "cand_key": self.cand.key(),
            "verdict": self.verdict,
            "note": self.note(),
            "base_median_ms": self.median_ms("base"),
            "cand_median_ms": self.median_ms("cand"),
            "blocks": [{"base": b, "cand": c} for b, c in self.blocks],
            "result": self.result.as_dict() if self.result else None,
        }


@dataclass
class ABResult:
    pair_id: str
    run_ids: dict[str, str]  # side -> run id
    sides: dict[str, Side]
    design: Design
    cells: list[CellPair]
    blocks: int = 0

    @property
    def aa(self) -> bool:
        return self.sides["base"].same_as(self.sides["cand"])

    @property
    def failed(self) -> bool:
        """What a CI gate fails on: a regression, or a cell the candidate broke."""
        return any(c.verdict in FAILING for c in self.cells)

    @property
    def undecided(self) -> list[CellPair]:
        """Cells the blocks did not decide (`noisy` at the cap, or no block measured):
        neither a pass nor a failure, and never reported as either."""
        return [c for c in self.cells if c.verdict in UNDECIDED]

    @property
    def outcome(self) -> str:
        """The gate's answer: `regressed` outranks `undecided`, which outranks `passed`."""
        if self.failed:
            return "regressed"
        return "undecided" if self.undecided else "passed"

    @property
    def headline(self) -> str:
        """The first words of every rendering: what a CI reader must see first."""
        outcome = self.outcome
        if outcome == "regressed":
            bad = sum(c.verdict in FAILING for c in self.cells)
            return f"regressed: {bad} cell{'s' * (bad != 1)} worse or newly failing"
        if outcome == "undecided":
            n = len(self.undecided)
            return f"undecided: {n} cell{'s' * (n != 1)} noisy"
        return "no regression"

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "headline": self.headline,
            "pair": self.pair_id,
            "runs": self.run_ids,
            "aa": self.aa,
            "sides": {k: s.record() for k, s in self.sides.items()},
            "design": self.design.rule() | {"seed": self.design.seed, "order": "ABBA/BAAB"},
            "blocks": self.blocks,
            "failed": self.failed,
            "cells": [c.as_dict() for c in self.cells],
        }


# Called after each repetition: (block, cell pair, side, result).
OnRepetition = Callable[[int, CellPair, str, RepetitionResult], None]


def interleave(
    runners: dict[str, Runner],
    sides: dict[str, Side],
    design: Design,
    *,
    command: str = "",
    on_repetition: OnRepetition | None = None,
    on_block: Callable[[ABResult], None] | None = None,
) -> ABResult:
    """Measure both sides block by block into their runs (one store) until every cell
    has a verdict or the cap is reached."""
    store = runners["base"].store
    run_ids = {}
    for name, runner in runners.items():
        run_ids[name], _ = runner.open(command, resume=False, annotate={"ab": sides[name].record()})
    pair_id = store.create_pair(
        run_ids["base"],
        run_ids["cand"],
        design.rule() | {"seed": design.seed, "order": "ABBA/BAAB"},
    )
    cells = [
        CellPair(b, c)
        for b, c in zip(runners["base"].spec.cells(), runners["cand"].spec.cells(), strict=True)
    ]
    result = ABResult(pair_id, run_ids, sides, design, cells)
    rng = random.Random(design.seed)
    reps = {name: 0 for name in runners}
    artifacts = {name: scratch.make() for name in runners}
    scratch.clean_orphans()
    try:
        for block in range(design.max_blocks):
            result.blocks = block + 1
            for pair in (p for p in cells if not p.done):
                _block(
                    pair,
                    block,
                    rng.choice(ORDERS),
                    runners,
                    run_ids,
                    artifacts,
                    reps,
                    on_repetition,
                )
                last = block + 1 == design.max_blocks
                if not pair.failed and (pair.blocks or last):
                    pair.result = decide(pair.log_ratios, **design.rule(), last=last)
            store.finish_pair(pair_id, result.as_dict())
            if on_block:
                on_block(result)
            if all(p.done for p in cells):
                break
    finally:
        for name in runners:
            scratch.remove(artifacts[name])
            store.finish_run(run_ids[name])
        store.finish_pair(pair_id, result.as_dict())
    return result


def _block(
    pair: CellPair,
    block: int,
    order: tuple[str, ...],
    runners: dict[str, Runner],
    run_ids: dict[str, str],
    artifacts: dict[str, Path],
    reps: dict[str, int],
    on_repetition: OnRepetition | None,
) -> None:
    values: dict[str, list[float]] = {"base": [], "cand": []}
    for side in order:
        cell = pair.base if side == "base" else pair.cand
        r = runners[side].run_one(run_ids[side], cell, reps[side], artifacts[side])
        reps[side] += 1
        if on_repetition:
            on_repetition(block, pair, side, r)
        if r.status in FAILED_STATUSES or r.status in ("unavailable", "unsupported", "skipped"):
            pair.failed[side] = f"{r.status}: {r.reason}".strip(": ")[:200]
        elif (v := _latency_ms(r)) is not None and v > 0:
            values[side].append(v)
    if pair.failed:
        return
    if values["base"] and values["cand"]:
        pair.blocks.append((values["base"], values["cand"]))
    else:
        pair.lost += 1


__all__ = ["ABResult", "CellPair", "Design", "FAILING", "ORDERS", "UNDECIDED", "interleave"]
