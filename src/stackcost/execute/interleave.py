"""Interleaved A/B: measure a base and a candidate side by side, decide from paired blocks.

Both sides are ordinary runs in the store, linked as a pair; the pair's verdicts are
stored after every block, so an interrupted A/B keeps what it measured. After each look
the cells with a clear verdict stop; the rest go on until the cap.

**bursts** (the default) answers the two kinds of noise of a small shared machine: modes
that last seconds, and a bias of each process (docs/guides/regressions.md). Each block
starts one fresh worker per side (which starts first is drawn per block and recorded);
both prepare, verify and warm up as a repetition does; then the parent alternates short
bursts of steps between them, in random order per pair (execute/paced.py,
measure/bursts.py). A burst pair tens of milliseconds apart sees the same mode, which
cancels in its ratio; a block's estimate is the mean log ratio of its pairs, and the
verdict comes from independent blocks, which average the per-process bias.
- Where a rung's step runs on torch's OpenMP pool at 2+ threads, its threads are bound one
  per core in both workers (bind_threads): a fresh process otherwise draws its own thread
  placement.
- Where the cell has fewer threads than the host has cores (and OpenMP does not bind
  them), both workers are pinned to the same cores, drawn per block and recorded
  (same_cores), once both are warm (they start beside each other on every core): the
  kernel otherwise keeps each idle-waking worker on the core it last ran on, so a burst
  pair compared two cores, and a slow spell on one core (a busy neighbour on the host)
  became the block's bias.
- At the first look an undecided cell is replanned by where its ratio varied (replan):
  more, cheaper blocks when its blocks differ more than their pairs explain, longer ones
  otherwise.
- Both workers run on the design's allocator (stackcost.allocators).
- A pair where either burst saw other work on the cores is dropped and counted. Each
  worker is one repetition in its side's run.

**processes** runs, for every cell still undecided, four repetitions a block in the order
ABBA or BAAB (drawn per block, seeded), each its own process as in `run`; the block's log
ratio of the cell's repetition medians is one paired sample (measure/paired.py). Cells
that cannot be cut into bursts (LoadGen scenarios, serving, training, a native program
that runs the whole repetition) keep this design, and the result says which design
decided each cell.

Either way, disturbed repetitions are retried as in `run` (--on-disturbed); a block where
a side has no valid repetition gives no ratio for that cell, and the note says how many
were lost. A cell that fails on one side only is `newly failing` or `fixed`, not timed.

A generate cell is judged twice from the same measurements: its time to first token and
its time per output token each get their own verdict (METRICS), since a change to the
prefill and one to the decode step are different regressions. In bursts, a burst is whole
generations (one, unless a generation is shorter than --burst-ms), and each burst pair
gives both metrics their paired values: the bursts' TTFT and their decode steps' median.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stackcost.allocators import GATE_ALLOCATOR
from stackcost.backends import omp_bindable
from stackcost.cell import GENERATE, Cell
from stackcost.execute import scratch
from stackcost.execute.cores import host_cpus
from stackcost.execute.paced import BurstChannel, PacedWorker, Refused
from stackcost.execute.runner import Runner
from stackcost.execute.sides import Side
from stackcost.measure.bursts import SIZING_STEPS, TPOT_NS, TTFT_NS
from stackcost.measure.paired import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_BLOCKS,
    DEFAULT_MIN_BLOCKS,
    DEFAULT_THRESHOLD,
    PairedResult,
    block_log_ratio,
    decide,
    paired_spreads,
)
from stackcost.measure.stats import Spreads, process_spreads
from stackcost.result import FAILED_STATUSES, VALID_STATUSES, RepetitionResult
from stackcost.scenarios.task import RepetitionTask

ORDERS = (("base", "cand", "cand", "base"), ("cand", "base", "base", "cand"))
# How a block is measured: warm workers alternating bursts, or whole-process repetitions.
PACINGS = ("bursts", "processes")
# Verdicts a CI gate fails on: a regression, or a cell the candidate broke.
FAILING = ("regressed", "newly failing")
# Verdicts that decide nothing: more blocks or a quieter machine were needed.
UNDECIDED = ("noisy", "undecided")
# What is judged of a cell, by mode: one latency, or a generation's TTFT and TPOT apart
# (each the GenerationResult field a repetition's value is read from).
LATENCY = "latency"
GENERATION_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_p50_ms"}
METRICS = {GENERATE: tuple(GENERATION_METRICS)}
# A burst's value of each metric: the field of its reply (measure/bursts.py) and how its
# samples are summed up: the mean step, the generations' median TTFT, the decode steps'
# median (as a repetition's TPOT p50 is).
BURST_READS: dict[str, tuple[str, Callable[[list[float]], float]]] = {
    LATENCY: ("ns", statistics.fmean),
    "ttft": (TTFT_NS, statistics.median),
    "tpot": (TPOT_NS, statistics.median),
}


@dataclass(frozen=True)
class BurstShape:
    """How a cell's blocks of bursts are shaped, by mode: the timed units (steps, or whole
    generations of seconds each) in each worker's sizing burst, and the fewest burst pairs
    a block's estimate is taken from, whatever its time."""

    sizing: int = SIZING_STEPS
    min_pairs: int = 5


# A generate cell's pair of whole generations gives TTFT one prefill a side: that noise,
# not the process's bias, set its block's spread. llama-150m (64-token prompt, 16 new
# tokens, 2 threads, 2026-12-04, interleaved): 5 pairs a block gave TTFT blocks a
# 1.6-2.2% spread and 6-13 blocks to a verdict; 10 pairs gave 0.7-1.2% and 6 blocks,
# 114-120 s a cell against 95-200 s.
BURST_SHAPES = {GENERATE: BurstShape(sizing=1, min_pairs=10)}
MIN_PAIRS = BurstShape().min_pairs


def burst_shape(mode: str) -> BurstShape:
    return BURST_SHAPES.get(mode, BurstShape())


@dataclass(frozen=True)
class Design:
    """How the A/B is measured and decided (stored with the pair)."""

    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA
    min_blocks: int = DEFAULT_MIN_BLOCKS
    max_blocks: int = DEFAULT_MAX_BLOCKS
    seed: int = 0
    pacing: str = "bursts"  # PACINGS
    block_s: float = 2.0  # bursts: the time each block alternates bursts for
    burst_ms: float = 20.0  # bursts: a burst's length (at least one step)
    bind_threads: bool = True  # bursts: torch's OpenMP threads one per core (omp_bindable)
    same_cores: bool = True  # bursts: both workers of a narrower cell on one drawn set of cores
    replan: bool = True  # bursts: reshape an undecided cell's blocks at the first look (replan)
    allocator: str = GATE_ALLOCATOR  # both sides' workers' (stackcost.allocators)

    def rule(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "alpha": self.alpha,
            "min_blocks": self.min_blocks,
            "max_blocks": self.max_blocks,
        }

    def record(self) -> dict[str, Any]:
        """The rule and how blocks are measured: stored with the pair."""
        pacing = (
            {
                "pacing": "bursts",
                "block_s": self.block_s,
                "burst_ms": self.burst_ms,
                "bind_threads": self.bind_threads,
                "same_cores": self.same_cores,
                "replan": self.replan,
            }
            if self.pacing == "bursts"
            else {"pacing": "processes", "order": "ABBA/BAAB"}
        )
        return self.rule() | {"seed": self.seed, "allocator": self.allocator} | pacing


def pacable(cell: Cell) -> bool:
    """Whether a cell can be cut into bursts: stackcost's own timed loop of inference (the
    worker refuses a backend whose program runs the whole repetition), or generation
    through the rung's own API, neither under a LoadGen scenario nor served at a rate."""
    return cell.scenario is None and cell.serve is None and cell.mode != "train"


def metrics(cell: Cell) -> tuple[str, ...]:
    """What is judged of `cell`, each with its own verdict."""
    return METRICS.get(cell.mode, (LATENCY,))


def _value_ms(r: RepetitionResult, metric: str) -> float | None:
    """A repetition's value of `metric`: its median latency (a LoadGen scenario's headline
    latency), or a generation's median TTFT or TPOT p50."""
    if r.status not in VALID_STATUSES:
        return None
    if metric in GENERATION_METRICS:
        return getattr(r.generation, GENERATION_METRICS[metric]) if r.generation else None
    if r.scenario is not None:
        return r.scenario.latency_ms
    return r.stats.median_ms if r.stats else None


@dataclass
class CellPair:
    """One cell measured on both sides: its values block by block and its verdict."""

    base: Cell
    cand: Cell
    # Per block, each side's values (ms): repetition medians, or one per kept burst pair.
    blocks: list[tuple[list[float], list[float]]] = field(default_factory=list)
    estimates: list[float] = field(default_factory=list)  # per block: its log ratio
    lost: int = 0  # blocks with no valid repetition on a side
    failed: dict[str, str] = field(default_factory=dict)  # side -> status: reason
    result: PairedResult | None = None
    design: str = "processes"  # what decided it: bursts or processes
    design_note: str = ""  # why a cell meant for bursts was measured in processes
    dropped_pairs: int = 0  # burst pairs dropped because the cores were busy
    # bursts, per block: the side started first, the timed steps a burst, and each side's
    # step (ms) as its worker reported it when it got ready (what sized bursts before)
    burst_blocks: list[dict[str, Any]] = field(default_factory=list)
    metric: str = LATENCY  # what is judged (METRICS): a generate cell has one pair per metric
    # The cell's own block plan (replan): its cap on blocks and, in bursts, each block's
    # time; None: the design's. `plan_note` says what changed and why.
    cap: int | None = None
    block_s: float | None = None
    plan_note: str = ""

    @property
    def label(self) -> str:
        return self.cand.label() + ("" if self.metric == LATENCY else f" {self.metric}")

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
        return self.estimates

    def median_ms(self, side: str) -> float | None:
        values = [v for block in self.blocks for v in block[side == "cand"]]
        return statistics.median(values) if values else None

    def spreads(self, side: str) -> Spreads:
        """Where `side`'s time varied: within a block's process (its bursts; none in the
        processes design, whose values are whole repetitions), and between the blocks'
        processes (measure.stats.process_spreads)."""
        values = [block[side == "cand"] for block in self.blocks]
        if self.design != "bursts":  # one value per process: nothing within
            values = [[v] for block in values for v in block]
        return process_spreads(values)

    def cap_in(self, design: Design) -> int:
        """The cell's cap on blocks: its own once replanned, else the design's."""
        return self.cap or design.max_blocks

    def pair_spreads(self) -> Spreads | None:
        """Bursts: where the ratio itself varied, within a block's pairs and between its
        blocks (measure.paired.paired_spreads); None in the processes design."""
        return paired_spreads(self.blocks) if self.design == "bursts" else None

    def processes_differ(self) -> bool:
        """Whether the blocks' processes carry more of their own than the rest explains:
        the ratio's spreads in bursts, the base side's in processes."""
        return (self.pair_spreads() or self.spreads("base")).between_dominates

    def page_faults(self) -> list[float]:
        """Every bursts worker's page faults per step, both sides: [] where not counted."""
        return [
            f
            for block in self.burst_blocks
            for f in (block.get("page_faults_per_step") or {}).values()
            if f is not None
        ]

    def note(self) -> str:
        parts = [f"{side} {why}" for side, why in self.failed.items()]
        if self.design_note:
            parts.append(self.design_note)
        if self.plan_note:
            parts.append(self.plan_note)
        if self.dropped_pairs:
            parts.append(f"{self.dropped_pairs} burst pair(s) dropped: other work on the cores")
        if self.lost:
            parts.append(f"{self.lost} block(s) lost to invalid repetitions")
        if self.verdict == "noisy" and self.processes_differ():
            # Each fresh process carries its own bias (its layout): only more of them help.
            why = "its processes differ more than their bursts"
            if faults := self.page_faults():
                why += f" (page faults a step: {min(faults):.0f}–{max(faults):.0f})"
            parts.append(f"{why}: more blocks average it")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell": self.label,
            "base_key": self.base.key(),
            "cand_key": self.cand.key(),
            "metric": self.metric,
            "verdict": self.verdict,
            "design": self.design,
            "plan": {"cap": self.cap, "block_s": self.block_s, "why": self.plan_note},
            "note": self.note(),
            "base_median_ms": self.median_ms("base"),
            "cand_median_ms": self.median_ms("cand"),
            # Relative SDs: within a block's process, between the blocks' processes; and
            # for bursts, the ratio's own: within a block's pairs, between its blocks.
            "spreads": {
                side: {"within": sp.within, "between": sp.between}
                for side, sp in (
                    ("base", self.spreads("base")),
                    ("cand", self.spreads("cand")),
                    ("pairs", self.pair_spreads()),
                )
                if sp is not None
            },
            "blocks": [
                {"base": b, "cand": c, "log_ratio": e}
                | (self.burst_blocks[i] if i < len(self.burst_blocks) else {})
                for i, ((b, c), e) in enumerate(zip(self.blocks, self.estimates, strict=True))
            ],
            "dropped_pairs": self.dropped_pairs,
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
            "design": self.design.record(),
            "blocks": self.blocks,
            "failed": self.failed,
            "cells": [c.as_dict() for c in self.cells],
        }


# replan: an undecided burst cell whose processes differ more than their bursts gets
# cheaper blocks, and more of them; one whose bursts vary more gets longer blocks.
REPLAN_CAP = 1.5  # x the design's cap on blocks
REPLAN_BLOCK = 2.0  # block time / or x this
MIN_BLOCK_S = 0.5  # s: a block still holds its fewest burst pairs


def replan(group: list[CellPair], design: Design) -> None:
    """At the first look, reshape the rest of an undecided burst cell's blocks by where its
    ratio varied (issue 62, measure.paired.paired_spreads): its blocks' estimates differ
    more than their burst pairs explain, so each process pair carries its own and only
    more of them average it: cheaper blocks (half the time) and REPLAN_CAP x the cap; else
    the pairs' own noise is what is left: blocks twice as long, the same cap. The looks stay
    three, each at alpha / 3, wherever they fall; what moves them is the noise's shape,
    which says nothing of the ratio's direction."""
    head = group[0]
    if not design.replan or head.design != "bursts" or head.plan_note:
        return
    spreads = head.pair_spreads()
    if spreads is None or spreads.within is None or spreads.between is None:
        return
    # What the blocks' estimates would scatter by if their pairs were all there was.
    expected = spreads.within / math.sqrt(spreads.windows)
    if spreads.between_dominates:
        cap = max(design.max_blocks, round(design.max_blocks * REPLAN_CAP))
        block_s = max(MIN_BLOCK_S, design.block_s / REPLAN_BLOCK)
        why = (
            f"its blocks' ratios differed by {spreads.between:.1%} where their burst pairs "
            f"explain {expected:.1%}: blocks cut to {block_s:g} s, up to {cap} of them"
        )
    else:
        cap, block_s = design.max_blocks, design.block_s * REPLAN_BLOCK
        why = (
            f"its blocks' ratios differed by {spreads.between:.1%}, as their burst pairs "
            f"explain ({expected:.1%}): blocks of {block_s:g} s"
        )
    for pair in group:
        pair.cap, pair.block_s, pair.plan_note = cap, block_s, why


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
    pair_id = store.create_pair(run_ids["base"], run_ids["cand"], design.record())
    # One group per cell: the pairs judged from the same repetitions, one per metric.
    groups = [
        [
            CellPair(
                b,
                c,
                design="bursts" if design.pacing == "bursts" and pacable(b) else "processes",
                metric=metric,
            )
            for metric in metrics(b)
        ]
        for b, c in zip(runners["base"].spec.cells(), runners["cand"].spec.cells(), strict=True)
    ]
    cells = [pair for group in groups for pair in group]
    result = ABResult(pair_id, run_ids, sides, design, cells)
    rng = random.Random(design.seed)
    reps = {name: 0 for name in runners}
    artifacts = {name: scratch.make() for name in runners}
    scratch.clean_orphans()
    try:
        block = 0
        while any(block < p.cap_in(design) for p in cells if not p.done):
            result.blocks = block + 1
            for group in groups:
                live = [p for p in group if not p.done and block < p.cap_in(design)]
                if not live:
                    continue
                paced = live[0].design == "bursts" and _burst_block(
                    live, block, rng, design, runners, run_ids, artifacts, reps, on_repetition
                )
                if not paced:
                    _block(
                        live,
                        block,
                        rng.choice(ORDERS),
                        runners,
                        run_ids,
                        artifacts,
                        reps,
                        on_repetition,
                    )
                for pair in live:
                    cap = pair.cap_in(design)
                    last = block + 1 == cap
                    if not pair.failed and (pair.blocks or last):
                        rule = design.rule() | {"max_blocks": cap}
                        pair.result = decide(pair.log_ratios, **rule, last=last)
                if len(live[0].blocks) == design.min_blocks and not live[0].done:
                    replan(live, design)
            store.finish_pair(pair_id, result.as_dict())
            if on_block:
                on_block(result)
            if all(p.done for p in cells):
                break
            block += 1
    finally:
        for name in runners:
            scratch.remove(artifacts[name])
            store.finish_run(run_ids[name])
        store.finish_pair(pair_id, result.as_dict())
    return result


def _block(
    pairs: list[CellPair],
    block: int,
    order: tuple[str, ...],
    runners: dict[str, Runner],
    run_ids: dict[str, str],
    artifacts: dict[str, Path],
    reps: dict[str, int],
    on_repetition: OnRepetition | None,
) -> None:
    """One block of the processes design for one cell, judged on each of its metrics."""
    values = [{"base": [], "cand": []} for _ in pairs]  # per pair: side -> values (ms)
    for side in order:
        cell = pairs[0].base if side == "base" else pairs[0].cand
        r = runners[side].run_one(run_ids[side], cell, reps[side], artifacts[side])
        reps[side] += 1
        if on_repetition:
            on_repetition(block, pairs[0], side, r)
        for pair, v in zip(pairs, values, strict=True):
            if not _failed(pair, side, r) and (x := _value_ms(r, pair.metric)) and x > 0:
                v[side].append(x)
    for pair, v in zip(pairs, values, strict=True):
        if pair.failed:
            continue
        if v["base"] and v["cand"]:
            pair.blocks.append((v["base"], v["cand"]))
            pair.estimates.append(block_log_ratio(v["base"], v["cand"]))
        else:
            pair.lost += 1


def _burst_block(
    pairs: list[CellPair],
    block: int,
    rng: random.Random,
    design: Design,
    runners: dict[str, Runner],
    run_ids: dict[str, str],
    artifacts: dict[str, Path],
    reps: dict[str, int],
    on_repetition: OnRepetition | None,
) -> bool:
    """One block of the bursts design for one cell, judged on each of its metrics from the
    same burst pairs; False when the cell cannot be paced (the caller measures this block,
    and the cell from now on, in processes)."""
    head = pairs[0]
    first = rng.sample(("base", "cand"), 2)  # which side's worker starts first
    tasks = _burst_tasks(pairs, first, design, runners, run_ids, artifacts, reps)
    if tasks is None:
        return True
    cores = None
    if design.same_cores:
        cores = shared_cores(head.base, design.bind_threads, design.seed, block)
    lock = runners["base"].executor.lock  # one machine lock serves both sides
    with lock.held():
        try:
            workers, steps_ns = _ready_workers(first, tasks, runners)
        except Refused as exc:
            for pair in pairs:
                pair.design = "processes"
                pair.design_note = f"measured in processes, not bursts: {exc}"
            return False
        alt, steps, shape = None, None, burst_shape(head.base.mode)
        if cores:
            for w in workers.values():
                w.pin(cores)
        if all(steps_ns.values()):
            steps = burst_steps(workers, design.burst_ms, rng, shape.sizing)
        if steps:
            alt = alternate(workers, steps, head.block_s or design.block_s, rng, shape.min_pairs)
        results = _finish_workers(workers, steps_ns, alt)
    for side, r in results.items():
        runners[side].record(run_ids[side], tasks[side].cell, r)
        reps[side] += 1
        if on_repetition:
            on_repetition(block, head, side, r)
        for pair in pairs:
            _failed(pair, side, r)
    _judge_bursts(pairs, first, steps, steps_ns, alt, results, cores)
    return True


def shared_cores(cell: Cell, bind_threads: bool, seed: int, block: int) -> frozenset[int] | None:
    """The cores both burst workers of the cell share in this block (same_cores), or None.
    A cell whose threads OpenMP binds one per core keeps that binding: moving its threads
    afterwards would let each run on any of the drawn cores."""
    if bind_threads and omp_bindable(cell):
        return None
    return block_cores(cell.threads, seed, block)


def block_cores(threads: int, seed: int, block: int) -> frozenset[int] | None:
    """The cores both workers of a block are pinned to: `threads` of the host's, drawn
    from the block's own seed (the order draws stay the same wherever it runs); None (not
    pinned) when the cell is as wide as the host or wider."""
    cpus = host_cpus()
    if threads >= len(cpus):
        return None
    return frozenset(random.Random(f"cores {seed} {block}").sample(cpus, threads))


def _burst_tasks(
    pairs: list[CellPair],
    first: list[str],
    design: Design,
    runners: dict[str, Runner],
    run_ids: dict[str, str],
    artifacts: dict[str, Path],
    reps: dict[str, int],
) -> dict[str, RepetitionTask] | None:
    """Each side's repetition task for a burst worker; None when a side cannot run here
    (its runner stored why, and the pairs note it)."""
    head = pairs[0]
    tasks = {}
    for side in first:
        cell = head.base if side == "base" else head.cand
        task = runners[side].task_for(run_ids[side], cell, reps[side], artifacts[side])
        if not isinstance(task, RepetitionTask):  # cannot run here: stored as such
            reps[side] += 1
            for pair in pairs:
                _failed(pair, side, task)
            return None
        tasks[side] = task.model_copy(update={"bind_threads": design.bind_threads})
    return tasks


def _ready_workers(
    first: list[str], tasks: dict[str, RepetitionTask], runners: dict[str, Runner]
) -> tuple[dict[str, PacedWorker], dict[str, float | None]]:
    """One worker per side, started in `first`'s order, and each one's step time once it
    is warm (None: it ended first). Refused, with both workers killed, when the cell cannot
    be paced."""
    workers = {
        side: PacedWorker(
            runners[side].executor.python,
            runners[side].executor.environ(tasks[side]),
            tasks[side],
        )
        for side in first
    }
    try:
        return workers, {side: workers[side].ready() for side in first}
    except Refused:
        for w in workers.values():
            w.kill()
        raise


def _finish_workers(
    workers: dict[str, PacedWorker],
    steps_ns: dict[str, float | None],
    alt: Alternation | None,
) -> dict[str, RepetitionResult]:
    """Each worker's repetition result, where it has one to keep."""
    results = {}
    for side, w in workers.items():
        if (alt and alt.kept) or not steps_ns[side] or w.proc.poll() is not None:
            results[side] = w.finish()  # measured, or ended: its result says how
        else:  # the other side never got warm: this one measured nothing to keep
            w.kill()
    return results


def _judge_bursts(
    pairs: list[CellPair],
    first: list[str],
    steps: int | None,
    steps_ns: dict[str, float | None],
    alt: Alternation | None,
    results: dict[str, RepetitionResult],
    cores: frozenset[int] | None,
) -> None:
    """Add the block's burst pairs to each metric's pair still measured, or count the
    block lost for it."""
    for pair in pairs:
        if pair.failed:
            continue
        if alt is None:
            pair.lost += 1
            continue
        values = alt.values(pair.metric)
        pair.dropped_pairs += alt.dropped
        if not values["base"]:
            pair.lost += 1
            continue
        pair.burst_blocks.append(
            {
                "first": first[0],
                "burst_steps": steps,
                "ready_ms": {side: ns / 1e6 for side, ns in steps_ns.items() if ns},
                "cores": sorted(cores) if cores else None,  # both workers' (same_cores)
                # Pages each worker's allocator handed out afresh, a step: a process that
                # faults where the next does not carries its own speed (allocators.py).
                "page_faults_per_step": {
                    side: r.details.get("page_faults_per_step") for side, r in results.items()
                },
            }
        )
        pair.blocks.append((values["base"], values["cand"]))
        # Paired values: mean log cand - mean log base is the mean log ratio of the pairs.
        pair.estimates.append(block_log_ratio(values["base"], values["cand"]))


def burst_value_ms(reply: Mapping[str, Any], metric: str) -> float | None:
    """A burst's value of `metric` (ms): its mean step, its generations' median TTFT, or
    the median of its decode steps; None when it measured none (a single new token has no
    decode step)."""
    name, summed = BURST_READS[metric]
    samples = reply.get(name) or []
    return summed(samples) / 1e6 if samples else None


@dataclass(frozen=True)
class Alternation:
    """One block's alternation: the burst pairs it kept (each side's reply), and how many
    it dropped."""

    sides: tuple[str, ...]
    pairs: list[dict[str, dict[str, Any]]]
    dropped: int

    @property
    def kept(self) -> int:
        return len(self.pairs)

    def values(self, metric: str = LATENCY) -> dict[str, list[float]]:
        """Each side's value of `metric` (ms) per kept pair where both sides have one:
        paired, position by position."""
        values: dict[str, list[float]] = {side: [] for side in self.sides}
        for pair in self.pairs:
            read = {side: burst_value_ms(reply, metric) for side, reply in pair.items()}
            if all(v is not None for v in read.values()):
                for side, v in read.items():
                    values[side].append(v)  # type: ignore[arg-type]
        return values


def burst_steps(
    workers: Mapping[str, BurstChannel],
    burst_ms: float,
    rng: random.Random,
    sizing: int = SIZING_STEPS,
) -> int | None:
    """Timed units (steps, or generations) per burst for a block: about `burst_ms` of the
    slower side's unit, at least one; None if a worker died. Sized from one sizing burst of
    `sizing` units each, in random order, once both are warm: the time a worker reports
    when it gets ready may have been taken while the other was still importing and
    compiling beside it, which read it slow and made the block's bursts short. The sizing
    bursts' units stay in the repetitions, as any burst's do, but are in no pair."""
    replies = [workers[side].burst(sizing) for side in rng.sample(list(workers), 2)]
    if any(r is None for r in replies):
        return None
    unit_ns = max(statistics.median(r["ns"]) for r in replies)  # type: ignore[index]
    return max(1, round(burst_ms * 1e6 / unit_ns))


def alternate(
    workers: Mapping[str, BurstChannel],
    steps: int,
    block_s: float,
    rng: random.Random,
    min_pairs: int = MIN_PAIRS,
) -> Alternation:
    """Burst pairs for `block_s` seconds (at least `min_pairs`), each pair's order drawn;
    the kept pairs' replies, which Alternation.values reads per metric. A pair where either
    burst saw other work on the cores is dropped. The two workers may be any children on
    the burst channel: two sides' repetitions (`ab`), or a repetition and a peer harness
    (benchmarks/agreement.py)."""
    end = time.perf_counter() + block_s
    kept: list[dict[str, dict[str, Any]]] = []
    dropped = 0
    while time.perf_counter() < end or len(kept) < min_pairs:
        replies = {side: workers[side].burst(steps) for side in rng.sample(list(workers), 2)}
        if any(r is None for r in replies.values()):
            break  # a worker died mid-block: its result says how
        if any(r["disturbed"] for r in replies.values()):  # type: ignore[index]
            dropped += 1
            if dropped > 10 * max(len(kept), min_pairs):
                break  # the machine is busy: the block ends with what it has
            continue
        kept.append(replies)  # type: ignore[arg-type]
    return Alternation(tuple(workers), kept, dropped)


def _failed(pair: CellPair, side: str, r: RepetitionResult) -> bool:
    """Note a side's repetition that failed or could not run; True when it did."""
    if r.status in FAILED_STATUSES or r.status in ("unavailable", "unsupported", "skipped"):
        pair.failed[side] = f"{r.status}: {r.reason}".strip(": ")[:200]
        return True
    return False


__all__ = [
    "ABResult",
    "Alternation",
    "CellPair",
    "Design",
    "FAILING",
    "LATENCY",
    "METRICS",
    "BURST_SHAPES",
    "BurstShape",
    "MIN_PAIRS",
    "ORDERS",
    "PACINGS",
    "UNDECIDED",
    "alternate",
    "burst_shape",
    "burst_steps",
    "burst_value_ms",
    "interleave",
    "metrics",
    "pacable",
]
