"""Verdicts between two runs: load each side, match cells by key, compare each metric."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stackcost.cell import Cell
from stackcost.compare.stats import (
    BETWEEN_RUN_SPREAD,
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    MIN_REPETITIONS,
    MetricComparison,
    compare_metric,
    status_verdict,
    worst,
)
from stackcost.errors import SpecError
from stackcost.result import (
    MEASURED_STATUSES,
    TRUSTED_STATUSES,
    VALID_STATUSES,
    RepetitionResult,
    headline,
)
from stackcost.store.runs import CellResult, RunResult

# metric -> (values of one valid repetition, higher is better, drifts between runs)
Extractor = Callable[[RepetitionResult], list[float]]


def _latency(r: RepetitionResult) -> list[float]:
    if r.scenario is not None:  # a LoadGen cell: its p90/p99 headline (server and offline
        # have a rate instead, compared as throughput)
        return [] if r.scenario.latency_ms is None else [r.scenario.latency_ms]
    if r.samples_ns:
        return [ns / 1e6 for ns in r.samples_ns]
    return [r.stats.median_ms] if r.stats else []


# Timings drift with the machine between runs; a peak RSS does not.
METRICS: dict[str, tuple[Extractor, bool, bool]] = {
    "latency": (_latency, False, True),
    "throughput": (lambda r: [r.throughput] if r.throughput else [], True, True),
    "peak_memory": (lambda r: [float(r.memory.peak_rss_bytes)] if r.memory else [], False, False),
    "cold_start": (
        lambda r: [r.cold_start_ms] if r.cold_start_ms is not None else [],
        False,
        True,
    ),
}


@dataclass
class Side:
    """One side of a comparison: where it came from and its cells by key."""

    label: str
    cells: dict[str, CellResult]


@dataclass
class CellComparison:
    cell: Cell
    verdict: str
    metrics: list[MetricComparison] = field(default_factory=list)
    note: str = ""

    def metric(self, name: str) -> MetricComparison | None:
        return next((m for m in self.metrics if m.metric == name), None)


@dataclass
class Comparison:
    baseline: str
    candidate: str
    cells: list[CellComparison]
    spread: float = BETWEEN_RUN_SPREAD  # the between-run drift a timing must exceed

    def count(self, verdict: str) -> int:
        return sum(c.verdict == verdict for c in self.cells)

    @property
    def failed(self) -> bool:
        """What the CI gate fails on: a regression, or a cell that stopped working."""
        return any(c.verdict in ("regressed", "newly failing") for c in self.cells)


def _from_run(run: RunResult, label: str) -> Side:
    return Side(label, {c.cell.key(): c for c in run.cells()})


def _from_json(path: Path) -> Side:
    from stackcost.compare.run_json import read_run_json

    run = read_run_json(path)  # validated: a truncated file is one line, not a traceback
    return _from_run(run, f"{path.name} ({run.run_id})")


def run_to_json(run: RunResult) -> str:
    """A self-contained JSON of a run, samples included, that `load_side` reads back."""
    return json.dumps(
        {
            "run_id": run.run_id,
            "env": run.env,
            "spec": run.spec,
            "records": [
                {"cell": c.model_dump(mode="json"), "result": r.model_dump(mode="json")}
                for c, r in run.records
            ],
        },
        default=str,
    )


def load_side(ref: str, db: str | Path) -> Side:
    """A run id in `db`, a DB file (its latest run) or a JSON written by run_to_json."""
    from stackcost.store.runs import load_runs

    path = Path(ref)
    if path.suffix == ".json" and path.is_file():
        return _from_json(path)
    if path.is_file():
        run = load_runs(path, [])[0]
        return _from_run(run, f"{path.name} ({run.run_id})")
    if not Path(db).is_file():
        raise SpecError(f"{ref!r} is neither a file nor a run id in {str(db)!r} (no such DB)")
    return _from_run(load_runs(db, [ref])[0], ref)


def repetition_values(cell: CellResult, metric: str) -> list[list[float]]:
    """One list per valid repetition; a disturbed cell's disturbed ones when it has no valid
    one (shown next to an `untrusted` verdict, never deciding one)."""
    extract = METRICS[metric][0]
    for statuses in (VALID_STATUSES, MEASURED_STATUSES):
        if values := [v for r in cell.repetitions if r.status in statuses and (v := extract(r))]:
            return values
    return []


def _measured(cell: CellResult | None) -> bool | None:
    return None if cell is None else cell.status in MEASURED_STATUSES


# What to do about an untrusted side, by its status.
REMEDY = {
    "unstable": "measure it again until it is ok (a longer --max-time, a quieter machine)",
    "disturbed": "measure it again on a quiet machine",
}


def status_reason(cell: CellResult) -> str:
    """Why the cell has its status: the headline of a repetition's reason that gave it,
    or the disagreement of its repetitions' medians."""
    reasons = [r.reason for r in cell.repetitions if r.status == cell.status and r.reason]
    return headline(reasons[0]) if reasons else cell.spread_reason


def _status(side: str, cell: CellResult) -> str:
    reason = status_reason(cell).removeprefix(f"{cell.status}: ")  # "disturbed: other ..."
    return f"{side} {cell.status}" + (f": {reason}" if reason else "")


def _untrusted(side: str, cell: CellResult) -> str:
    return f"{_status(side, cell)}; {REMEDY[cell.status]}"


def _trust_verdict(base: CellResult, cand: CellResult) -> tuple[str | None, str]:
    """A verdict the sides' statuses decide before any metric, and a note that marks an
    untrusted side. Only a base whose every repetition is `ok` may be a baseline; an
    `unstable` candidate is still compared (its timings are valid, only wider than
    asked), a `disturbed` one is not. Repetitions that settled but disagree with each
    other (spread_reason) are no reason to distrust a side here: the verdict already
    asks for the repetitions to be apart, and the note says they disagree."""
    if base.repetition_status not in TRUSTED_STATUSES:
        return "untrusted base", _untrusted("base", base)
    if cand.status == "disturbed":
        return "untrusted candidate", _untrusted("candidate", cand)
    if not cand.trusted or not base.trusted:
        notes = [_status(n, c) for n, c in (("base", base), ("candidate", cand)) if not c.trusted]
        return None, "; ".join(notes)
    return None, ""


def _few_repetitions(metrics: list[MetricComparison]) -> str:
    counts = sorted({m.repetitions for m in metrics if not m.enough_repetitions})
    had = ", ".join(f"{b} vs {c} repetitions" for b, c in counts)
    return f"{had}; run with --repeats {MIN_REPETITIONS} or more"


def compare_cells(
    base: CellResult | None,
    cand: CellResult | None,
    thresholds: Mapping[str, float],
    alpha: float,
    spread: float = BETWEEN_RUN_SPREAD,
) -> CellComparison:
    cell = (cand or base).cell  # type: ignore[union-attr]
    early = status_verdict(_measured(base), _measured(cand))
    if early is not None:
        who = cand if early in ("newly failing",) else base if early == "fixed" else None
        note = f"{who.status}: {who.reason}" if who is not None else ""
        return CellComparison(cell, early, note=note.strip(": "))
    assert base is not None and cand is not None
    metrics = []
    for name, (_, higher, drifts) in METRICS.items():
        b, c = repetition_values(base, name), repetition_values(cand, name)
        if b and c:
            t = thresholds.get(name, thresholds.get("default", DEFAULT_THRESHOLD))
            metrics.append(
                compare_metric(
                    name,
                    b,
                    c,
                    higher_is_better=higher,
                    threshold=t,
                    alpha=alpha,
                    spread=spread if drifts else 0.0,
                )
            )
    trust, note = _trust_verdict(base, cand)
    verdict = trust or worst([m.verdict for m in metrics])
    if verdict == "too few repetitions":
        note = "; ".join(filter(None, [_few_repetitions(metrics), note]))
    return CellComparison(cell, verdict, metrics, note)


def compare_sides(
    base: Side,
    cand: Side,
    thresholds: Mapping[str, float] | None = None,
    alpha: float = DEFAULT_ALPHA,
    spread: float = BETWEEN_RUN_SPREAD,
) -> Comparison:
    thresholds = dict(thresholds or {})
    keys = list(base.cells) + [k for k in cand.cells if k not in base.cells]
    cells = [
        compare_cells(base.cells.get(k), cand.cells.get(k), thresholds, alpha, spread) for k in keys
    ]
    return Comparison(base.label, cand.label, cells, spread)
