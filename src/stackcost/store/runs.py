"""A run's results as typed objects and as a tidy pandas DataFrame."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.cell import Cell
from stackcost.errors import SpecError
from stackcost.measure.leak import confirmed, suspected
from stackcost.measure.stats import (
    RepetitionInterval,
    Spreads,
    Stats,
    repetition_interval,
    spread_reason,
    spreads,
    summarize,
    window_spread,
)
from stackcost.result import (
    FAILED_STATUSES,
    TRUSTED_STATUSES,
    VALID_STATUSES,
    Memory,
    RepetitionResult,
)
from stackcost.store.database import Store
from stackcost.store.heldout import HeldoutResult, Key, key, latest

if TYPE_CHECKING:
    import pandas as pd

    from stackcost.result import ScenarioResult


@dataclass
class CellResult:
    """All repetitions of one cell, with the summary the tables show.

    The repetition (its own process) is the unit of evidence: the cell's interval is
    `interval`, over the repetition medians (measure.stats.repetition_interval); each
    repetition's own `stats` CI is within-process. Repetitions that disagree beyond the
    run's target_ci (measure.stats.spread_reason) make an otherwise ok cell `unstable`,
    with `spread_reason` saying so; `repetition_status` is the status without that rule.
    """

    cell: Cell
    repetitions: list[RepetitionResult] = field(default_factory=list)
    # The run's protocol target and confidence (RunSpec.protocol): what repetitions must
    # agree to. None where the run has no timed-loop protocol (training): no spread rule.
    target_ci: float | None = None
    confidence: float = 0.95

    @property
    def repetition_status(self) -> str:
        """The worst repetition status: one failure makes the cell fail."""
        statuses = [r.status for r in self.repetitions]
        for s in statuses:
            if s in FAILED_STATUSES:
                return s
        for s in ("skipped", "unavailable", "unsupported", "disturbed", "unstable"):
            if s in statuses:
                return s
        return "ok" if statuses else "missing"

    @property
    def status(self) -> str:
        """repetition_status, but `unstable` where every repetition is ok and their
        medians disagree beyond the target (spread_reason)."""
        status = self.repetition_status
        return "unstable" if status == "ok" and self.spread_reason else status

    @property
    def spread_reason(self) -> str:
        """Why the valid repetitions' medians disagree beyond the run's target_ci; '' when
        they agree, when there are fewer than two, or when the run set no target. A cell
        whose `status` is unstable with repetition_status ok is unstable for this alone."""
        if self.target_ci is None or self.cell.scenario is not None:
            return ""  # a LoadGen cell's verdict is LoadGen's; a training run has no target
        return spread_reason(self.repetition_medians, self.target_ci, self.confidence)

    @property
    def reason(self) -> str:
        if self.repetition_status == "ok" and (spread := self.spread_reason):
            return spread
        return next((r.reason for r in self.repetitions if r.reason), "")

    @property
    def valid(self) -> bool:
        return self.status in VALID_STATUSES

    @property
    def trusted(self) -> bool:
        """Fit to be a baseline or a ratio's denominator: every repetition `ok`, and their
        medians agreeing to the target."""
        return self.status in TRUSTED_STATUSES

    @property
    def repetition_medians(self) -> list[float]:
        """The median of each valid repetition, in ms: the cell's units of evidence."""
        return [r.stats.median_ms for r in self.repetitions if r.valid and r.stats]

    @property
    def interval(self) -> RepetitionInterval | None:
        """The cell's CI: a t-interval over its valid repetitions' medians; None with fewer
        than two (one repetition's CI is within-process only: its `stats`)."""
        return repetition_interval(self.repetition_medians, self.confidence)

    @property
    def spreads(self) -> Spreads | None:
        """Where the valid repetitions' timings vary: between windows of one process, and
        between processes (measure.stats.spreads); None with fewer than two."""
        valid = [r.samples_ns for r in self.repetitions if r.valid and r.samples_ns]
        return spreads(valid) if len(valid) >= 2 else None

    @property
    def stats(self) -> Stats | None:
        """The valid repetitions' samples pooled; None when no timing is valid. Its CI is
        over pooled iterations, which are correlated within a process: it is not the
        cell's uncertainty (that is `interval`), and no view shows it."""
        samples = [ns for r in self.repetitions if r.valid for ns in r.samples_ns]
        return summarize(samples) if samples else None

    def median_of(self, attr: str) -> float | None:
        """Median over repetitions of a per-repetition number (cold start, startup)."""
        values = [v for r in self.repetitions if (v := getattr(r, attr)) is not None]
        return float(statistics.median(values)) if values else None

    @property
    def max_rel_err(self) -> float | None:
        errors = [r.verification.max_rel_err for r in self.repetitions if r.verification]
        return max(errors) if errors else None

    @property
    def peak_memory(self) -> Memory | None:
        """The repetition with the highest peak RSS."""
        memories = [r.memory for r in self.repetitions if r.memory]
        return max(memories, key=lambda m: m.peak_rss_bytes) if memories else None

    @property
    def leak_bytes_per_iter(self) -> float | None:
        """The cell's leak, in bytes per iteration: None unless its repetitions agree on
        one (measure.leak.confirmed); one repetition's flag is kept in its own result."""
        return confirmed([r.leak for r in self.repetitions])

    @property
    def leak_suspected_bytes_per_iter(self) -> float | None:
        """A leak its only repetition flagged, in bytes per iteration (measure.leak.suspected):
        shown as unconfirmed until a second repetition agrees."""
        return suspected([r.leak for r in self.repetitions])


def superseded_dropped(
    records: list[tuple[Cell, RepetitionResult]],
) -> list[tuple[Cell, RepetitionResult]]:
    """A repetition tried more than once (interrupted, then resumed; or disturbed, then
    retried) stays in the store as history, but leaves the view: the cell's result for
    that repetition is its last completed try. Records come in store (insertion) order."""
    last: dict[tuple[str, int], int] = {}
    for i, (c, r) in enumerate(records):
        if r.status != "interrupted":
            last[(c.key(), r.repetition)] = i
    return [(c, r) for i, (c, r) in enumerate(records) if last.get((c.key(), r.repetition), i) == i]


@dataclass
class RunResult:
    run_id: str
    db_path: Path
    env: dict[str, Any]
    spec: dict[str, Any]
    records: list[tuple[Cell, RepetitionResult]]
    stopped: str = ""  # why the run stopped before its plan was done (--on-disturbed fail)
    # The store's latest held-out rows of this run's models (store/heldout.py), any run's.
    heldout: dict[Key, HeldoutResult] = field(default_factory=dict)

    @classmethod
    def from_store(cls, store: Store, run_id: str) -> RunResult:
        row = store.run_row(run_id)
        if row is None:
            raise KeyError(run_id)
        records = superseded_dropped(list(store.repetitions(run_id)))
        return cls(
            run_id=run_id,
            db_path=store.path,
            env=json.loads(row["env_json"]),
            spec=json.loads(row["spec_json"]),
            records=records,
            heldout=latest(store, {c.model.name for c, _ in records}),
        )

    def heldout_of(self, cell: Cell) -> HeldoutResult | None:
        """The latest held-out result of the cell's weights, rung, precision and options."""
        return self.heldout.get(key(cell.model, cell.backend, cell.precision, cell.backend_options))

    @property
    def target_ci(self) -> float | None:
        """The protocol's target_ci the run's repetitions settled to (None for a run with no
        timed-loop protocol, such as training)."""
        protocol = self.spec.get("protocol")
        return protocol.get("target_ci") if isinstance(protocol, dict) else None

    @property
    def confidence(self) -> float:
        protocol = self.spec.get("protocol")
        return (protocol.get("confidence") if isinstance(protocol, dict) else None) or 0.95

    def cells(self) -> list[CellResult]:
        by_key: dict[str, CellResult] = {}
        target, confidence = self.target_ci, self.confidence
        for cell, rep in self.records:
            fresh = CellResult(cell, target_ci=target, confidence=confidence)
            by_key.setdefault(cell.key(), fresh).repetitions.append(rep)
        return list(by_key.values())

    @property
    def failed(self) -> bool:
        return any(rep.status in FAILED_STATUSES for _, rep in self.records)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per repetition; timings of invalid repetitions are left empty. Its CI
        columns are the repetition's own, within one process: within_ci_low/high_ms."""
        import pandas as pd

        rows = []
        for cell, rep in self.records:
            s, m, v = rep.stats if rep.valid else None, rep.memory, rep.verification
            rows.append(
                {
                    "run_id": self.run_id,
                    "cell_key": cell.key(),
                    **cell.flat(),
                    "repetition": rep.repetition,
                    "status": rep.status,
                    "reason": rep.reason,
                    "median_ms": s.median_ms if s else None,
                    "mean_ms": s.mean_ms if s else None,
                    # This repetition's own CI: over its iterations, in one process.
                    "within_ci_low_ms": s.ci_low_ms if s else None,
                    "within_ci_high_ms": s.ci_high_ms if s else None,
                    "p90_ms": s.p90_ms if s else None,
                    "p99_ms": s.p99_ms if s else None,
                    "iqr_ms": s.iqr_ms if s else None,
                    "min_ms": s.min_ms if s else None,
                    "max_ms": s.max_ms if s else None,
                    "cv": s.cv if s else None,
                    # This process's own spread: the relative SD of its window medians.
                    "window_spread": window_spread(rep.samples_ns) if s else None,
                    "n_samples": s.n if s else None,
                    "throughput_per_s": rep.throughput if rep.valid else None,
                    "cold_start_ms": rep.cold_start_ms,
                    "startup_ms": rep.startup_ms,
                    "peak_rss_bytes": m.peak_rss_bytes if m else None,
                    "peak_over_baseline_bytes": m.peak_over_baseline_bytes if m else None,
                    "allocator_peak_bytes": m.allocator_peak_bytes if m else None,
                    "leak_bytes_per_iter": rep.leak_bytes_per_iter,
                    "leak": rep.leak["leak"] if rep.leak else None,
                    "max_abs_err": v.max_abs_err if v else None,
                    "max_rel_err": v.max_rel_err if v else None,
                    "prepare_s": rep.phases.prepare_s,
                    "total_s": rep.phases.total_s,
                    "weights_digest": rep.weights_digest,
                    # Only on scenario cells, like flat()'s "scenario": LoadGen's headline.
                    **(_scenario_columns(rep.scenario) if rep.scenario else {}),
                }
            )
        return pd.DataFrame(rows)


def _scenario_columns(s: ScenarioResult) -> dict[str, Any]:
    """A scenario repetition's LoadGen headline as columns: 'p90 latency', 12.8, 'ms'."""
    return {
        "loadgen_metric": s.metric,
        "loadgen_value": s.value,
        "loadgen_unit": s.unit,
        "loadgen_verdict": s.verdict,
    }


def load_runs(db: str | Path, run_ids: list[str], every: bool = False) -> list[RunResult]:
    """Stored runs by id (the latest alone when none is given, all with `every`);
    SpecError if missing."""
    if not Path(db).is_file():
        raise SpecError(f"no database at {str(db)!r}")
    with Store(db, read_only=True) as store:
        known = store.run_ids()
        if not known and store.heldout():
            raise SpecError(
                f"{str(db)!r} holds only held-out rows (stackcost heldout), no measured run: "
                "time the model into it with stackcost run to see them beside its speed"
            )
        if not known:
            raise SpecError(f"{str(db)!r} holds no runs")
        for run_id in run_ids:
            if run_id not in known:
                raise SpecError(f"run {run_id!r} is not in {str(db)!r} (latest: {known[-1]})")
        chosen = known if every else (run_ids or known[-1:])
        return [RunResult.from_store(store, r) for r in chosen]
