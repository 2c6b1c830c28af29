"""A run's results as typed objects and as a tidy pandas DataFrame."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.cell import Cell
from stackcost.errors import SpecError
from stackcost.measure.stats import Stats, summarize
from stackcost.result import (
    FAILED_STATUSES,
    TRUSTED_STATUSES,
    VALID_STATUSES,
    Memory,
    RepetitionResult,
)
from stackcost.store.database import Store

if TYPE_CHECKING:
    import pandas as pd

    from stackcost.result import ScenarioResult


@dataclass
class CellResult:
    """All repetitions of one cell, with the summary the tables show."""

    cell: Cell
    repetitions: list[RepetitionResult] = field(default_factory=list)

    @property
    def status(self) -> str:
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
    def reason(self) -> str:
        return next((r.reason for r in self.repetitions if r.reason), "")

    @property
    def valid(self) -> bool:
        return self.status in VALID_STATUSES

    @property
    def trusted(self) -> bool:
        """Fit to be a baseline or a ratio's denominator: every repetition `ok`."""
        return self.status in TRUSTED_STATUSES

    @property
    def stats(self) -> Stats | None:
        """Pooled over the valid repetitions; None when no timing is valid."""
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

    @classmethod
    def from_store(cls, store: Store, run_id: str) -> RunResult:
        row = store.run_row(run_id)
        if row is None:
            raise KeyError(run_id)
        return cls(
            run_id=run_id,
            db_path=store.path,
            env=json.loads(row["env_json"]),
            spec=json.loads(row["spec_json"]),
            records=superseded_dropped(list(store.repetitions(run_id))),
        )

    def cells(self) -> list[CellResult]:
        by_key: dict[str, CellResult] = {}
        for cell, rep in self.records:
            by_key.setdefault(cell.key(), CellResult(cell)).repetitions.append(rep)
        return list(by_key.values())

    @property
    def failed(self) -> bool:
        return any(rep.status in FAILED_STATUSES for _, rep in self.records)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per repetition; timings of invalid repetitions are left empty."""
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
                    "ci_low_ms": s.ci_low_ms if s else None,
                    "ci_high_ms": s.ci_high_ms if s else None,
                    "p90_ms": s.p90_ms if s else None,
                    "p99_ms": s.p99_ms if s else None,
                    "iqr_ms": s.iqr_ms if s else None,
                    "min_ms": s.min_ms if s else None,
                    "max_ms": s.max_ms if s else None,
                    "cv": s.cv if s else None,
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
        if not known:
            raise SpecError(f"{str(db)!r} holds no runs")
        for run_id in run_ids:
            if run_id not in known:
                raise SpecError(f"run {run_id!r} is not in {str(db)!r} (latest: {known[-1]})")
        chosen = known if every else (run_ids or known[-1:])
        return [RunResult.from_store(store, r) for r in chosen]
