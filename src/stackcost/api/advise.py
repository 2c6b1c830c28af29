"""advise: the deployment decision for one model under the user's constraints, searched
within a budget and decided by measurement.

The search, phase by phase, each phase stored as ordinary runs in the store:
1. **Feasibility.** Cells no rung here can run (unavailable, unsupported precision or
   mode) are found from the rungs' facts, before anything runs.
2. **Screening.** One short process per runnable cell, one run per rung (resumable). A
   cell is pruned when it breaks a bound, or trails the best cell on the objective, by
   more than the margin; a wrong output is out.
3. **Finals.** The best few survivors measured in full (the stop rule, 3 processes each).
   A finalist whose evidence is `unstable` or `disturbed` is measured again with more
   processes; one still not `ok` is never recommended.
4. **Side by side.** When the two best finalists are within the gate's resolution, they
   are measured interleaved (`stackcost ab`'s machinery) and the answer is "X over Y by d
   [CI]" or "a tie, then the smaller memory".

A decoder served under load (`mode` serve) is searched the same way over its engines and
thread counts: a cell's figure is the request rate its sweep held within the SLO
(advise.evidence.served_evidence_of), each cell is screened by one sweep with fewer
rates, and two close finalists take turns for more processes rather than interleaving
(a sweep holds the machine).

When the budget runs out, what was not tried is said, with why. A search run again with
the same request resumes its runs: finished measurements are not repeated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.advise.advice import Advice, Entry
from stackcost.advise.constraints import Constraints, check_objective
from stackcost.advise.evidence import (
    Evidence,
    axes_of,
    evidence_of,
    search_key,
    served_evidence_of,
)
from stackcost.advise.search import (
    USABLE,
    coarse,
    eligible,
    estimates,
    finalists,
    group,
    most_threads,
    pair_order,
    promising,
    ranked,
    screen,
    screen_check,
    sibling,
    too_close,
)
from stackcost.api.advise_pair import earlier_answers, earlier_pair, interleaved, objective_ratio
from stackcost.api.advise_quality import QualityScores, check_quality, train_first
from stackcost.api.catalog import backends as catalog_backends
from stackcost.api.grid import check_db, measure, prepare
from stackcost.cell import ModelRef, ServeConfig
from stackcost.errors import SpecError
from stackcost.measure.paired import DEFAULT_THRESHOLD
from stackcost.measure.protocol import Protocol
from stackcost.runspec.run import RunSpec, model_ref, validate

if TYPE_CHECKING:
    from stackcost.cell import Cell
    from stackcost.store.runs import CellResult, RunResult

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_PRECISIONS",
    "SCREEN_PROTOCOL",
    "Search",
    "advise",
    "default_backends",
    "load_advice",
    "measured_runs",
    "search_of",
]

DEFAULT_PRECISIONS = ("fp32", "int8-dyn", "int8")
GENERATE_PRECISIONS = ("fp32", "w8", "w4")  # token generation's weight-only precisions
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16)
# A screening process: a median and a rough tail in about a second of timed calls, after at
# most a second of warm-up; a slow batch stops at the cap with what it has (`unstable`).
SCREEN_PROTOCOL = Protocol(
    min_time_s=0.3, min_iters=3, max_time_s=1.0, warmup_max_time_s=1.0, target_ci=0.05
)
# A served cell's sweep (serving/sweep.py): in full, the two ends and four rates between,
# 6 s each (a process about a minute); screening, two rates between, held as long (a
# shorter window misses a queue that builds: 3 s windows moved the rate held by -33% to
# +79% against the full sweeps, engine by engine).
FINAL_SWEEP = ServeConfig(rates=4, per_rate_s=6.0, budget_s=54.0)
SCREEN_RATES = 2
MODES = ("infer", "generate", "serve")
# Two close served finalists each get this many more processes, when the budget holds
# them at a sweep's budget plus a process's start (build, verify, engine) each.
SERVE_MORE = 2
SERVE_START_S = 30.0
FINAL_REPEATS = 3
RETRY_REPEATS = 5  # a disturbed finalist, measured again
# A finalist's processes differ by more than one process's noise (issue 62's layouts): it
# gets more of them, up to this many, until their interval is within the target.
MAX_FINAL_REPEATS = 10
# The screening may spend this share of the budget; the rest is the finals' and the pair's.
# The coarse pass covers every rung and precision, so it comes before the middles, which
# an estimate mostly prunes; the finals and the pair keep the last 30%.
SCREEN_SHARE = 0.7
COARSE_SHARE = 0.55  # of which the coarse pass, every rung at its ends, may spend this,
MIDDLE_SHARE = 0.62  # and the coarse and middle passes together this

OnPhase = Callable[[str], None]


def _ignore(_: str) -> None:
    return None


@dataclass
class Search:
    """What to search and how: the grid, the bounds, the objective and the budget."""

    model: ModelRef
    backends: list[str]
    # "infer"; "generate": a decoder's tokens, its call one decode step; "serve": a
    # decoder's engine under a request-rate sweep, ranked by the rate it held in the SLO.
    mode: str = "infer"
    precisions: list[str] = field(default_factory=lambda: list(DEFAULT_PRECISIONS))
    batch_sizes: list[int] = field(default_factory=lambda: list(DEFAULT_BATCH_SIZES))
    threads: list[int] = field(default_factory=lambda: [1])
    sizes: dict[str, list[int]] = field(default_factory=dict)
    constraints: Constraints = field(default_factory=Constraints)
    objective: str = "latency"
    margin: float = 0.25
    finalists: int = 3
    budget_s: float = 1200.0
    threshold: float = DEFAULT_THRESHOLD
    reproduce_model: str = ""  # how a command line names the model ('' : its name)
    # The quality bound's examples (a checkpoint folder's) and a recipe's kept weights.
    quality_data: str | None = None
    weights_dir: str | None = None
    artifacts_dir: str | None = None  # where finalists' artifacts are kept (default: by the db)
    # How a screening process and a finalist's processes measure (a test shortens them).
    screen_protocol: Protocol = field(default_factory=SCREEN_PROTOCOL.model_copy)
    final_protocol: Protocol = field(default_factory=Protocol)
    final_repeats: int = FINAL_REPEATS
    # A served cell's sweep, screening and in full (serve mode only).
    final_sweep: ServeConfig = field(default_factory=FINAL_SWEEP.model_copy)
    screen_sweep: ServeConfig | None = None  # None: the final sweep's, with fewer rates

    def digest(self) -> str:
        """What makes two searches the same question: the grid, the bounds, the objective
        and the search's settings (not the budget: a larger one asks the same)."""
        import hashlib
        import json

        record = {
            "spec": validate(self.fields()).model_dump(mode="json"),
            "constraints": self.constraints.record(),
            "objective": self.objective,
            "margin": self.margin,
            "finalists": self.finalists,
            "threshold": self.threshold,
            "protocols": [self.screen_protocol.model_dump(), self.final_protocol.model_dump()],
            "final_repeats": self.final_repeats,
            "sweeps": [self.screening_sweep().model_dump(), self.final_sweep.model_dump()]
            if self.mode == "serve"
            else [],
            "quality_data": self.quality_data,
        }
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]

    def fields(self, **override: Any) -> dict[str, Any]:
        """RunSpec fields of the whole grid, or of a part of it (`override`). Served, the
        cells are `--scenario serve`'s, their SLO the token bounds, their sweep the
        finals' unless `override` gives the screening's."""
        mode = {"modes": [self.mode]}
        if self.mode == "serve":
            bounds = {"ttft_bound_ms": self.constraints.ttft_bound_ms,
                      "tpot_bound_ms": self.constraints.latency_bound_ms}  # fmt: skip
            mode = {
                "scenarios": ["serve"],
                "loadgen": {k: v for k, v in bounds.items() if v is not None},
                "serve": self.final_sweep.model_dump(),
            }
        return {
            "models": [self.model],
            "backends": self.backends,
            **mode,
            "precisions": self.precisions,
            "batch_sizes": self.batch_sizes,
            "threads": self.threads,
            "sizes": self.sizes,
            **override,
        }

    def screening_sweep(self) -> ServeConfig:
        """A served cell's screening sweep: the finals' windows, SCREEN_RATES rates."""
        if self.screen_sweep is not None:
            return self.screen_sweep
        return sweep_of(SCREEN_RATES, self.final_sweep.per_rate_s)

    def screening_fields(self) -> dict[str, Any]:
        """How a screening process measures: a short timed loop, or a short sweep."""
        if self.mode == "serve":
            return {"serve": self.screening_sweep().model_dump()}
        return {"protocol": self.screen_protocol}


def sweep_of(rates: int, per_rate_s: float) -> ServeConfig:
    """A sweep of `rates` rates between its ends, each held `per_rate_s`; its budget the
    plan's time and half again (for an engine that drains past its time)."""
    return FINAL_SWEEP.model_copy(
        update={
            "rates": rates,
            "per_rate_s": per_rate_s,
            "budget_s": 1.5 * (rates + 2) * per_rate_s,
        }
    )


def default_backends(mode: str = "infer") -> list[str]:
    """Every rung available here that runs inference itself, that generates tokens, or
    (serve) that has a serving engine."""
    from stackcost.serving.engines import ENGINES

    def searched(b: Any) -> bool:
        if mode == "serve":
            return b.generates and b.name in ENGINES
        return b.generates if mode == "generate" else "infer" in b.modes

    return [b.name for b in catalog_backends() if b.available and searched(b)]


def check_search(search: Search) -> RunSpec:
    """The whole grid validated, and the search's own settings; SpecError on bad input."""
    check_objective(search.objective)
    if search.mode not in MODES:
        raise SpecError(
            f"mode {search.mode!r} is not one advise searches (allowed: {', '.join(MODES)})"
        )
    if search.constraints.ttft_bound_ms is not None and search.mode == "infer":
        raise SpecError(
            "a TTFT bound applies to token generation: give --scenario generate or serve"
        )
    if search.mode == "serve":
        check_served(search)
    if not 0 <= search.margin < 1:
        raise SpecError(f"margin {search.margin!r} must be in [0, 1)")
    if search.finalists < 1:
        raise SpecError(f"finalists {search.finalists!r} must be at least 1")
    if not search.budget_s > 0:
        raise SpecError(f"budget {search.budget_s!r} s must be above 0")
    if not search.backends:
        raise SpecError("no rung to search: none is available here (stackcost list backends)")
    spec = validate(search.fields())
    check_quality(search.model.name, search.constraints.max_quality_loss, search.quality_data)
    return spec


def check_served(search: Search) -> None:
    """What a served search cannot take: its cells are ranked by the rate they hold within
    the SLO (judged at p99, as LoadGen's Server judges a rate), and they serve fp32."""
    if search.objective == "latency":
        raise SpecError(
            "--objective latency does not rank served engines: serve ranks by the request "
            "rate held within the SLO (--objective throughput) or by memory"
        )
    if search.constraints.percentile != "p99":
        raise SpecError(
            f"--percentile {search.constraints.percentile}: serve judges its SLO at p99"
        )
    if search.constraints.max_quality_loss is not None:
        raise SpecError(
            "--max-quality-loss: serve runs fp32 engines, verified against eager fp32; there "
            "is no quantized precision to judge held out"
        )


def advise(
    search: Search,
    db: str | Path = "stackcost.db",
    *,
    command: str = "stackcost.api.advise.advise()",
    on_phase: OnPhase = _ignore,
    on_start: Callable[..., None] | None = None,
    on_result: Callable[..., None] | None = None,
) -> Advice:
    """Search `search`'s grid within its budget and return the answer, stored in `db`.

    `on_phase` hears a line as each phase starts and ends; `on_start` and `on_result` hear
    each repetition (api.grid.measure's). Raises SpecError on bad input before anything
    is written."""
    started = time.monotonic()
    spec = check_search(search)
    check_db(db)
    prepared = prepare(spec)  # user code asked once; the rungs' facts for feasibility
    # A zoo model's recipe weights, trained the first time a quality bound needs them, are
    # trained before the search, outside its budget and its wall time.
    constraints = search.constraints
    started += train_first(
        search.model.name, constraints.max_quality_loss, search.weights_dir, db, on_phase
    )
    advice = Advice(
        model=search.model.name,
        objective=search.objective,
        constraints=search.constraints.record(),
        constraints_words=search.constraints.words(search.mode),
        mode=search.mode,
        margin=search.margin,
        threshold=search.threshold,
        budget_s=search.budget_s,
        request=search.digest(),
    )
    phase = _Phase(search, db, command, advice, started, on_phase, on_start, on_result)
    runnable = phase.feasibility(prepared.spec.cells(), prepared.facts)
    screened = phase.screening(runnable)
    final = phase.finals(screened)
    phase.decide(final)
    phase.annotate_quality()
    advice.wall_s = time.monotonic() - started
    return _stored(advice, db)


def _stored(advice: Advice, db: str | Path) -> Advice:
    from stackcost.store.database import Store

    with Store(db) as store:
        recommended = advice.recommended.label if advice.recommended else None
        advice.id = store.add_advice(advice.model, recommended, advice.model_dump(mode="json"))
    return advice


@dataclass
class _Phase:
    """The search's phases over one shared state: the answer being built, the clock."""

    search: Search
    db: str | Path
    command: str
    advice: Advice
    started: float
    on_phase: OnPhase
    on_start: Callable[..., None] | None
    on_result: Callable[..., None] | None
    estimated: list[Evidence] = field(default_factory=list)  # the middles' estimates
    quality: QualityScores | None = None  # with a quality bound: the verdicts so far
    served: dict[str, CellResult] = field(default_factory=dict)  # served finalists' runs

    def __post_init__(self) -> None:
        bound = self.search.constraints.max_quality_loss
        if bound is not None:
            self.quality = QualityScores(
                self.search.model.name, bound, self.search.quality_data,
                self.search.weights_dir, self.db, self.command, self.on_phase,
            )  # fmt: skip
            for earlier in earlier_answers(self.db, self.advice.request):  # scored already
                self.quality.remember(earlier.quality)

    def left_s(self) -> float:
        return self.search.budget_s - (time.monotonic() - self.started)

    def artifacts_dir(self) -> Path:
        """Where the finalists' exported and compiled artifacts are kept: the request's
        own folder beside the store, unless the search names one."""
        if self.search.artifacts_dir:
            return Path(self.search.artifacts_dir)
        return Path(self.db).resolve().parent / "advise-artifacts" / self.advice.request

    def measured(self, spec: RunSpec, role: str, keep: bool = False) -> RunResult:
        from stackcost.api.executors import ExecutorChoice

        keep_dir = str(self.artifacts_dir()) if keep else None
        result = measure(
            spec,
            self.db,
            executor=ExecutorChoice(keep_artifacts=keep_dir),
            command=f"{self.command} [{role}]",
            resume=True,
            on_start=self.on_start,
            on_result=self.on_result,
        )
        self.advice.runs.setdefault(role, []).append(result.run_id)
        return result

    def feasibility(self, cells: Sequence[Cell], facts: Mapping[str, Any]) -> list[Cell]:
        """The cells a rung here can run; the others enter the answer with the reason."""
        from stackcost.execute.runner import why_not_runnable

        runnable = []
        for cell in cells:
            blocked = why_not_runnable(cell, dict(facts))
            if blocked is None:
                runnable.append(cell)
                continue
            e = _unmeasured(cell, blocked[0], blocked[1])
            why = f"out: {blocked[0]}: {blocked[1]}".rstrip(": ")
            self.advice.entries.append(Entry.of(e, "feasibility", why))
        self.on_phase(f"feasibility: {len(runnable)} of {len(cells)} cells can run here")
        return runnable

    def screening(self, runnable: list[Cell]) -> list[Evidence]:
        """One short process per cell worth one, in three passes within the budget's
        share: every rung and precision at its batch ends and most threads (coarse); the
        batches between, where an estimate from the ends says they could win (middles);
        fewer threads, where the cell at the most threads could (threads)."""
        if self.search.mode == "serve":  # engines x threads: a few cells, each screened
            self.on_phase(f"screening: {len(runnable)} served cells, one short sweep each")
            return self._screen(runnable, SCREEN_SHARE)
        first, rest = coarse(runnable)
        # Quantized precisions first: on a CPU they are where a rung gains most, so a
        # budget too small for every end cuts fp32 cells (and says which).
        first.sort(key=lambda c: c.precision == "fp32")
        self.on_phase(
            f"screening, coarse: {len(first)} cells (each rung and precision at its ends)"
        )
        evidence = self._screen(first, COARSE_SHARE)
        reached = {(e.backend, e.precision) for e in evidence}
        if unreached := [c for c in rest if (c.backend, c.precision) not in reached]:
            self._not_tried(unreached, self.search.budget_s - self.left_s())
        evidence, lost = self._quality_gate(evidence)
        for cell in (c for c in rest if (c.backend, c.precision) in lost):
            why = lost[(cell.backend, cell.precision)]
            self.advice.entries.append(Entry.of(_unmeasured(cell, "skipped"), "quality", why))
        rest = [c for c in rest if (c.backend, c.precision) in reached - set(lost)]
        screened = {group(e) for e in evidence}
        evidence += self._middles(evidence, [c for c in rest if group(c) in screened])
        evidence += self._threads(evidence, [c for c in rest if group(c) not in screened])
        return evidence

    def _quality_gate(
        self, evidence: list[Evidence]
    ) -> tuple[list[Evidence], dict[tuple[str, str], str]]:
        """With a quality bound: the screened cells less those of the rungs and
        precisions that lose too much, judged from the best down until the best left is
        within it (so no cell is pruned as dominated by one that is out for quality);
        and each pair that is out, with why."""
        if self.quality is None:
            return evidence, {}
        search = self.search
        decisions = screen(evidence, search.constraints, search.objective, search.margin)
        meets = [
            e
            for e in evidence
            if e.status in USABLE
            and e.value(search.objective) is not None
            and not decisions[e.key].bound
        ]
        self.quality.fit(ranked(meets, search.objective), 1)
        lost = {
            pair: f"out: held out, quality {q.verdict} the bound: lost {q.words()}"
            for pair, q in self.quality.verdicts.items()
            if not q.within
        }
        kept = []
        for e in evidence:
            if (why := lost.get((e.backend, e.precision))) is None:
                kept.append(e)
            else:
                self.advice.entries.append(Entry.of(e, "quality", why))
        return kept, lost

    def _middles(self, evidence: list[Evidence], cells: list[Cell]) -> list[Evidence]:
        """The batches between the screened ends: measured where their estimate (linear
        in batch, advise.estimate) is kept, pruned on it where not; a pair whose ends
        cannot be interpolated is measured when an end was kept or broke only a bound."""
        search = self.search
        estimated = estimates(evidence, cells)
        self.estimated = list(estimated.values())
        decisions = screen(
            evidence + list(estimated.values()), search.constraints, search.objective,
            search.margin,
        )  # fmt: skip
        keep = promising(evidence, screen(evidence, search.constraints, search.objective,
                                          search.margin))  # fmt: skip
        order = pair_order(evidence, search.objective)
        chosen = []
        for cell in cells:
            e = estimated.get(search_key(cell))
            if e is not None and not decisions[e.key].kept:
                self.advice.entries.append(
                    Entry.of(e, "screening", f"pruned on an estimate: {decisions[e.key].why}")
                )
            elif e is not None or (cell.backend, cell.precision) in keep:
                chosen.append(cell)
            else:
                why = "not screened: its rung and precision trailed the best at both batch ends"
                self.advice.entries.append(Entry.of(_unmeasured(cell, "skipped"), "screening", why))
        chosen.sort(key=lambda c: order.get((c.backend, c.precision), len(order)))
        self.on_phase(f"screening, middles: {len(chosen)} of {len(cells)} cells")
        return self._screen(chosen, MIDDLE_SHARE)

    def _threads(self, evidence: list[Evidence], cells: list[Cell]) -> list[Evidence]:
        """Fewer threads than the most: measured where the same rung, precision and batch
        at the most threads was screened and kept; pruned with that sibling's reason."""
        search, keys = self.search, {e.key for e in evidence}
        known = evidence + [e for e in self.estimated if e.key not in keys]
        decisions = screen(known, search.constraints, search.objective, search.margin)
        siblings = most_threads(known)
        order = {e.key: n for n, e in enumerate(ranked(
            [e for e in known if decisions[e.key].kept], search.objective
        ))}  # fmt: skip
        chosen = []
        for cell in cells:
            s = siblings.get(sibling(cell))
            if s is not None and decisions[s.key].kept:
                chosen.append((order.get(s.key, len(order)), cell))
                continue
            why = (
                f"not screened: at t{s.threads} it was out ({decisions[s.key].why})"
                if s is not None
                else "not screened: its batch was not screened at the most threads"
            )
            self.advice.entries.append(Entry.of(_unmeasured(cell, "skipped"), "screening", why))
        chosen.sort(key=lambda pair: pair[0])
        self.on_phase(f"screening, fewer threads: {len(chosen)} of {len(cells)} cells")
        return self._screen([c for _, c in chosen], SCREEN_SHARE)

    def _screen(self, cells: list[Cell], share: float) -> list[Evidence]:
        """`cells` screened one run per (rung, precision, threads, sizes) group, until the
        screening has spent `share` of the budget; what it did not reach is said."""
        search, keys = self.search, {search_key(c) for c in cells}
        groups: dict[tuple, list[Cell]] = {}
        for c in cells:
            groups.setdefault(group(c), []).append(c)
        evidence: list[Evidence] = []
        for n, ((rung, precision, threads, sizes), members) in enumerate(groups.items()):
            spent = search.budget_s - self.left_s()
            if spent > search.budget_s * share:
                self._not_tried([c for g in list(groups.values())[n:] for c in g], spent)
                break
            spec = validate(
                search.fields(
                    backends=[rung], precisions=[precision], threads=[threads],
                    batch_sizes=sorted({c.batch_size for c in members}),
                    sizes={k: [v] for k, v in sizes}, **search.screening_fields(),
                )
            )  # fmt: skip
            result = self.measured(spec, "screening")
            evidence += [
                evidence_of(c, search.constraints.percentile)
                for c in result.cells()
                if search_key(c.cell) in keys
            ]
        return evidence

    def _not_tried(self, cells: list[Cell], spent: float) -> None:
        why = f"budget: screening had spent {spent:.0f} s of {self.search.budget_s:.0f} s"
        for rung in dict.fromkeys(c.backend for c in cells):
            n = sum(c.backend == rung for c in cells)
            self.advice.not_tried.append(f"{rung}: {n} cells ({why})")
        for cell in cells:
            self.advice.entries.append(Entry.of(_unmeasured(cell, "not tried"), "not tried", why))

    def finals(self, screened: list[Evidence]) -> list[Evidence]:
        """The best screened cells that meet the bounds (within the quality bound, when
        there is one), each measured in full; the full measurements check the screening.
        The best are those kept; a cell beyond the margin fills a place they leave, so
        that an unfit leader still leaves a measured fallback."""
        search = self.search
        decisions = screen(screened, search.constraints, search.objective, search.margin)
        kept = finalists(screened, decisions, search.objective, len(screened))
        out: list[Evidence] = []
        if self.quality is None:
            chosen = kept[: search.finalists]
        else:
            chosen, out = self.quality.fit(kept, search.finalists)
            self.advice.runs["quality"] = self.quality.runs
            self.advice.quality = self.quality.record()
        decided = {e.key for e in chosen + out}
        for e in out:
            q = self.quality.verdicts[(e.backend, e.precision)]  # type: ignore[union-attr]
            why = f"out: held out, quality {q.verdict} the bound: lost {q.words()}"
            self.advice.entries.append(Entry.of(e, "quality", why))
        for e in screened:
            d = decisions[e.key]
            if e.key not in decided:
                why = d.why if not d.kept else f"kept, not among the best {search.finalists}"
                self.advice.entries.append(Entry.of(e, "screening", why))
        self.on_phase(
            f"screening: {len(screened)} cells, {len(kept)} kept, {len(chosen)} finalists"
        )
        final = []
        for i, e in enumerate(chosen):
            if self.left_s() <= 0:
                self.advice.not_tried.append(f"{e.label}: finalist not measured in full (budget)")
                self.advice.entries.append(Entry.of(e, "screening", "finalist; budget spent"))
                continue
            self.on_phase(f"final {i + 1} of {len(chosen)}: {e.label}")
            final.append(self._final(e))
        self.advice.screen_check = screen_check(chosen, final, search.objective, search.margin)
        return final

    def annotate_quality(self) -> None:
        """Each entry whose rung and precision were judged held out says so."""
        if self.quality is None:
            return
        for entry in self.advice.entries:
            q = self.quality.verdicts.get((entry.backend, entry.precision))
            if q is not None:
                entry.quality, entry.quality_loss = q.words(), q.loss

    def _final(self, e: Evidence) -> Evidence:
        """The cell under the stop rule over processes: more of them until the interval
        of their medians is within the protocol's target (or MAX_FINAL_REPEATS); a
        disturbed one is measured again."""
        measured = self._one_cell(e, self.search.final_repeats)
        if measured.status == "disturbed" and self.left_s() > 0:
            self.on_phase(f"{e.label} was {measured.status}: again, {RETRY_REPEATS} processes")
            measured = self._one_cell(e, RETRY_REPEATS)
        return measured

    def _one_cell(self, e: Evidence, repeats: int) -> Evidence:
        fields = e.spec_fields()
        protocol = self.search.final_protocol
        rule = {"cell_ci": protocol.target_ci, "max_repeats": max(repeats, MAX_FINAL_REPEATS)}
        if self.search.mode == "serve":  # a sweep has no medians for the stop rule to read
            rule = {}
        spec = validate(self.search.fields(**fields, repeats=repeats, protocol=protocol, **rule))
        cell = self.measured(spec, "final", keep=True).cells()[0]
        if self.search.mode == "serve":
            self.served[e.key] = cell
        return evidence_of(cell, self.search.constraints.percentile)

    def decide(self, final: list[Evidence]) -> None:
        """The recommendation among the finalists fit to be recommended."""
        search, advice = self.search, self.advice
        # Every finalist ran the stop rule over processes: what it left unstable, more
        # processes would not have made agree.
        fitness = eligible(final, search.constraints, enough=search.final_repeats)
        fit = ranked([e for e in final if not fitness[e.key]], search.objective)
        for e in final:
            if fitness[e.key]:
                advice.entries.append(Entry.of(e, "final", f"not recommended: {fitness[e.key]}"))
        if not fit:
            advice.why_none = self._why_none(final)
            return
        winner, runner = fit[0], (fit[1] if len(fit) > 1 else None)
        advice.decided_by = _by_objective(winner, runner, search.objective)
        if runner is not None and too_close(winner, runner, search.objective, search.threshold):
            winner, runner = self._side_by_side(winner, runner)
        if winner.between_processes:  # recommended all the same: more would not agree
            advice.decided_by += (
                f"; its speed varies between processes ({winner.reason}), so read its "
                "interval over processes, not one process's figure"
            )
        advice.recommended = Entry.of(winner, "final", "recommended")
        advice.runner_up = Entry.of(runner, "final", "runner-up") if runner else None
        for e in fit:
            if e.key not in {winner.key, runner.key if runner else ""}:
                advice.entries.append(Entry.of(e, "final", "finalist"))
        advice.entries[:0] = [x for x in (advice.recommended, advice.runner_up) if x]
        advice.reproduce = _reproduce(search, winner)
        advice.artifact, advice.artifact_note = _artifact(self.artifacts_dir(), winner)

    def _why_none(self, final: list[Evidence]) -> str:
        advice = self.advice
        if final:
            return "no cell meets the bounds on full evidence"
        if any("finalist not measured" in n for n in advice.not_tried):
            return "the budget ran out before any finalist was measured in full"
        why = "no cell survived the screening"
        if any(e.phase == "quality" for e in advice.entries):
            why += " within the quality bound"
        if advice.not_tried:
            why += " (the budget left cells not tried: see below)"
        return why

    def _side_by_side(self, winner: Evidence, runner: Evidence) -> tuple[Evidence, Evidence]:
        """The two best finalists measured interleaved; returns them in their new order."""
        if self.search.mode == "serve" and self.search.objective == "throughput":
            return self._served_pair(winner, runner)
        if self.search.objective == "memory" or self.left_s() <= 0:
            why = "memory does not drift" if self.search.objective == "memory" else "budget"
            return self._tie(winner, runner, f"within {self.search.threshold:.0%} ({why})")
        cmp = earlier_pair(self.db, self.advice.request, winner, runner)
        if cmp is None:
            self.on_phase(f"side by side: {winner.label} against {runner.label}")
            search = self.search

            def spec_of(e: Evidence) -> RunSpec:
                return validate(search.fields(**e.spec_fields(), protocol=search.final_protocol))

            cmp = interleaved(spec_of, search.threshold, self.db, self.command, winner, runner)
            self.advice.runs["pair"] = [cmp.pair_id]
        else:
            self.on_phase(f"side by side: {winner.label} against {runner.label}, as stored")
            self.advice.runs["pair"] = [cmp.pair_id]
        self.advice.comparison = cmp
        better = objective_ratio(cmp, winner, runner, self.search.objective)
        low, ratio, high = better
        t = self.search.threshold
        objective = self.search.objective
        if low > 1 + t:  # the runner-up is surely better by more than the threshold
            self.advice.decided_by = (
                f"{runner.label} over {winner.label} by {ratio - 1:.1%} "
                f"[{low - 1:.1%}, {high - 1:.1%}] in {objective}, measured side by side"
            )
            return runner, winner
        if high < 1 - t:  # the winner is surely better
            self.advice.decided_by = (
                f"{winner.label} over {runner.label} by {1 / ratio - 1:.1%} "
                f"[{1 / high - 1:.1%}, {1 / low - 1:.1%}] in {objective}, measured side by side"
            )
            return winner, runner
        words = f"{ratio - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}]"
        return self._tie(winner, runner, f"within {t:.0%} side by side ({words})")

    def _served_pair(self, winner: Evidence, runner: Evidence) -> tuple[Evidence, Evidence]:
        """Two close served finalists: each gets SERVE_MORE more processes (runner-up
        first), as the budget allows, then the one ahead with the two ranges over
        processes apart wins; otherwise a tie. A sweep holds the whole machine, so the
        two are not interleaved within a process, only process by process."""
        search, sweep = self.search, self.search.final_sweep
        if self.left_s() >= 2 * SERVE_MORE * (sweep.budget_s + SERVE_START_S):
            self.on_phase(
                f"{winner.label} and {runner.label} are close: {SERVE_MORE} more processes each"
            )
            pooled = [self._more_served(e) for e in (runner, winner)]
            # A process that failed or was disturbed leaves the finals' evidence standing.
            if all(e.status == "ok" and e.throughput for e in pooled):
                runner, winner = sorted(pooled, key=lambda e: e.throughput or 0.0)
            if not too_close(winner, runner, search.objective, search.threshold):
                self.advice.decided_by = (
                    f"{winner.label} over {runner.label}: {_rates(winner)} against "
                    f"{_rates(runner)}, apart over processes (served engines take turns, "
                    "process by process)"
                )
                return winner, runner
        spans = "; ".join(f"{e.label}: {_rates(e)}" for e in (winner, runner))
        return self._tie(
            winner, runner,
            f"within {search.threshold:.0%}, or their processes' rates overlap ({spans}; "
            "served engines take turns, process by process)",
        )  # fmt: skip

    def _more_served(self, e: Evidence) -> Evidence:
        """SERVE_MORE more processes of a served finalist, pooled with its finals'."""
        spec = validate(self.search.fields(**e.spec_fields(), repeats=SERVE_MORE))
        more = self.measured(spec, "final", keep=True).cells()[0]
        return served_evidence_of(self.served[e.key], [more])

    def _tie(self, winner: Evidence, runner: Evidence, words: str) -> tuple[Evidence, Evidence]:
        first, second = sorted(
            (winner, runner), key=lambda e: (e.memory_bytes or 0, e.median_ms or 0)
        )
        self.advice.decided_by = f"a tie {words}, then the smaller memory"
        return first, second


def _rates(e: Evidence) -> str:
    """A served cell's rate held, with its processes' range: '820 req/s (600-1,000)'."""
    figure = f"{e.throughput:,.0f} req/s" if e.throughput else "none held"
    if e.interval is None:
        return figure
    low, high = (1000.0 / e.interval[1], 1000.0 / e.interval[0])
    return f"{figure} ({low:,.0f}-{high:,.0f} over {e.repetitions} processes)"


def _unmeasured(cell: Cell, status: str, reason: str = "") -> Evidence:
    """A cell's evidence where nothing was measured: its axes and why."""
    return Evidence(**axes_of(cell), status=status, reason=reason)


def _by_objective(winner: Evidence, runner: Evidence | None, objective: str) -> str:
    if runner is None:
        return "the only finalist that meets the bounds on full evidence"
    a, b = winner.value(objective), runner.value(objective)
    assert a is not None and b is not None
    ahead = (b / a - 1) if objective != "throughput" else (a / b - 1)
    return f"best {objective}: {ahead:.1%} ahead of {runner.label} (beyond the gate's resolution)"


def _artifact(home: Path, e: Evidence) -> tuple[str, str]:
    """The recommended cell's exported or compiled artifact, kept: its folder and what it
    holds, or why there is none (a rung that runs the model from its framework)."""
    record = e.details.get("artifact")
    key = record.get("key") if isinstance(record, dict) else None
    folder = home / key if isinstance(key, str) else None
    if folder is None or not folder.is_dir():
        return "", f"{e.backend} keeps no exported artifact: it builds the model from its framework"
    files = sorted(p.name for p in folder.iterdir() if p.name != "artifact.json")
    shown = ", ".join(files[:6]) + (f" and {len(files) - 6} more" if len(files) > 6 else "")
    what = (
        "Inductor's compiled kernels (a cache torch.compile reads; no deployable file)"
        if e.backend == "inductor"
        else shown
    )
    return str(folder), what


def _reproduce(search: Search, e: Evidence) -> str:
    sizes = "".join(f" --{k.replace('_', '-')} {v}" for k, v in e.sizes.items())
    mode = {"generate": " --scenario generate", "serve": " --scenario serve"}.get(search.mode, "")
    if search.mode == "serve":
        bounds = search.constraints
        sweep = search.final_sweep
        sizes += "".join(
            f" --{flag} {value:g}ms"
            for flag, value in (("tpot-bound", bounds.latency_bound_ms),
                                ("ttft-bound", bounds.ttft_bound_ms))
            if value is not None
        )  # fmt: skip
        sizes += (
            f" --serve-rates {sweep.rates} --serve-time {sweep.per_rate_s:g}s "
            f"--serve-budget {sweep.budget_s:g}s"
        )
    return (
        f"stackcost run {search.reproduce_model or search.model.name}{mode} --backends {e.backend} "
        f"--precision {e.precision} --batch-size {e.batch_size} --threads {e.threads}{sizes} "
        f"--repeats {e.repetitions or search.final_repeats}"
    )


def search_of(model: str | ModelRef, **fields: Any) -> Search:
    """A Search for `model` (a name as `stackcost run` takes it, or a ModelRef), every rung
    available here unless `backends` is given."""
    ref = model_ref(model) if isinstance(model, str) else model
    mode = fields.get("mode", "infer")
    fields.setdefault("backends", default_backends(mode))
    if mode == "generate":
        fields.setdefault("precisions", list(GENERATE_PRECISIONS))
    if mode == "serve":  # an engine serves fp32, one sequence a request
        fields.setdefault("precisions", ["fp32"])
        fields.setdefault("batch_sizes", [1])
        fields.setdefault("objective", "throughput")
    return Search(model=ref, **fields)


def load_advice(db: str | Path, which: str = "latest") -> Advice:
    """A stored answer by its id, or the newest ('latest'); SpecError when there is none.
    Nothing is written: a store that does not exist is refused, not made."""
    from stackcost.store.database import Store

    if not Path(db).is_file():
        raise SpecError(f"--db {str(db)!r}: no such store")
    with Store(db) as store:
        rows = store.advice()
    if not rows:
        raise SpecError(f"no advise answer is stored in {db}")
    row = rows[-1] if which == "latest" else next((r for r in rows if r["id"] == which), None)
    if row is None:
        raise SpecError(
            f"--advice {which!r}: no such answer in {db} (the latest is {rows[-1]['id']})"
        )
    answer = Advice.model_validate_json(row["advice_json"])
    answer.id = row["id"]
    return answer


def measured_runs(answer: Advice) -> list[str]:
    """The runs an answer measured its cells in (screening and finals), in order."""
    return list(dict.fromkeys(answer.runs.get("screening", []) + answer.runs.get("final", [])))
