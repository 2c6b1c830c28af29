"""A suite's summary, computed from stored RunResults alone: speedup and memory vs eager.

Per workload, eager median / backend median (speedup), peak RSS over baseline backend /
eager (CPU memory) and allocator peak backend / eager (device memory, CUDA only); per
backend, the geometric mean over workloads, saying over how many it is taken. Only cells
whose every repetition is `ok`, their medians agreeing to the protocol's target (trusted:
CellResult.status), and verified against the eager reference, over an eager cell that is
too, enter the means; every other (workload, backend) pair is listed with its status and
reason. An `unstable` cell is kept as indicative, marked "?" and averaged in a
second, indicative mean, never in the first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from stackcost.backends import BASELINE
from stackcost.result import TRUSTED_STATUSES, VALID_STATUSES, headline
from stackcost.spec.suite import Suite, workload_label, workload_label_of_spec

if TYPE_CHECKING:
    from stackcost.store.runs import CellResult, RunResult


@dataclass
class Entry:
    """One backend on one workload: its status, and its ratios to eager when they count."""

    status: str  # the cell's status; "missing" when it was never stored
    reason: str = ""  # why it enters no mean ("" when it does)
    median_ms: float | None = None  # a disturbed cell's is shown marked, never used
    disturbed: bool = False
    speedup: float | None = None  # eager median / this median
    cpu_memory: float | None = None  # peak RSS over baseline, this / eager
    device_memory: float | None = None  # allocator peak, this / eager (CUDA only)
    # The ratios are from a valid but untrusted (unstable) cell or eager: indicative only.
    indicative: bool = False

    @property
    def counted(self) -> bool:
        """Its ratios enter the (trusted) means."""
        return self.speedup is not None and not self.indicative

    @property
    def shown(self) -> str:
        """What a table shows in place of a ratio: the status, or, for an `ok` cell that
        still has none, why (its outputs unverified, or no trusted eager beside it)."""
        if self.status != "ok" or self.counted:
            return self.status
        return "unverified" if "verified" in self.reason else "no baseline"


@dataclass
class Row:
    """One workload (a suite entry): eager's cell and every backend's."""

    label: str
    model: str
    mode: str
    device: str
    domain: str = ""
    entries: dict[str, Entry] = field(default_factory=dict)  # backend -> entry (eager too)


@dataclass
class Geomean:
    value: float | None  # None when no workload counts
    n: int  # workloads it is taken over
    of: int  # workloads in the summary (of this mode)


@dataclass
class SuiteSummary:
    title: str  # the suite's name; "" for runs that are no named suite's
    backends: list[str]  # eager first
    rows: list[Row]
    modes: list[str]  # "infer", and "train" where train cells exist
    baseline: str = BASELINE

    def rows_of(self, mode: str) -> list[Row]:
        return [r for r in self.rows if r.mode == mode]

    def geomean(
        self, mode: str, backend: str, metric: str = "speedup", indicative: bool = False
    ) -> Geomean:
        """Geometric mean of `metric` (speedup, cpu_memory, device_memory) over the
        workloads of `mode` where the backend's ratio counts; with `indicative`, over
        those where it is indicative (unstable) too."""
        from scipy.stats import gmean

        rows = self.rows_of(mode)
        values = [
            v
            for r in rows
            if (e := r.entries.get(backend)) is not None
            and (e.counted or (indicative and e.indicative))
            and (v := getattr(e, metric)) is not None
            and math.isfinite(v)
            and v > 0
        ]
        return Geomean(float(gmean(values)) if values else None, len(values), len(rows))

    def not_counted(self, mode: str) -> list[tuple[Row, str, Entry]]:
        """Every (workload, backend) left out of the means, with its status and reason
        (indicative ones too: they are in the indicative mean only)."""
        return [
            (r, b, r.entries[b])
            for r in self.rows_of(mode)
            for b in self.backends
            if not r.entries[b].counted
        ]

    @property
    def has_indicative(self) -> bool:
        return any(e.indicative for r in self.rows for e in r.entries.values())

    @property
    def has_device_memory(self) -> bool:
        return any(e.device_memory is not None for r in self.rows for e in r.entries.values())


def _verified(c: CellResult) -> bool:
    return bool(c.repetitions) and all(
        r.verification is not None and r.verification.ok for r in c.repetitions
    )


def _status_reason(c: CellResult) -> str:
    reasons = [r.reason for r in c.repetitions if r.status == c.status and r.reason]
    return headline(reasons[0] if reasons else c.reason) or c.status


def _why_not(c: CellResult) -> str:
    """Why a cell gives no ratio at all: its status's reason (it has no valid timing),
    or that its outputs are unverified; "" when it gives one (trusted or indicative)."""
    if c.status not in VALID_STATUSES:
        return _status_reason(c)
    if not _verified(c):
        return "not verified against the eager reference"
    if c.stats is None:
        return "no timing stored"
    return ""


def _ratio(top: float | int | None, bottom: float | int | None) -> float | None:
    if top is None or bottom is None or top <= 0 or bottom <= 0:
        return None
    return top / bottom


def _group_key(cell: Any) -> tuple:
    """The workload and placement: everything but the backend."""
    return tuple(v for k, v in cell.flat().items() if k != "backend") + (
        tuple(sorted(cell.model.config.items())),
    )


def summarize(
    runs: Sequence[RunResult],
    title: str = "",
    expected: Sequence[str] = (),
    baseline: str = BASELINE,
) -> SuiteSummary:
    """The suite summary of stored runs: one row per workload (a later run's row replaces
    an earlier one's); `expected` workload labels with no stored run are rows too, with
    every backend "missing", so a model never drops out silently."""
    from stackcost import zoo
    from stackcost.report.marks import shown_stats

    backends: list[str] = [baseline]
    rows: dict[tuple, Row] = {}
    for run in runs:
        for b in [*run.spec.get("backends", []), *(c.backend for c, _ in run.records)]:
            if b not in backends:
                backends.append(b)
        groups: dict[tuple, list[CellResult]] = {}
        for c in run.cells():
            groups.setdefault(_group_key(c.cell), []).append(c)
        for key, cells in groups.items():
            first = cells[0].cell
            workload = zoo.MODELS.get(first.model.name)
            learned = run.spec.get("learned", {}).get(first.model.name, {})
            row = Row(
                label=workload_label(
                    first.model.name, first.batch_size, first.size_label(), first.model.config
                ),
                model=first.model.name,
                mode=first.mode,
                device=first.device,
                domain=workload.domain if workload else str(learned.get("domain", "")),
            )
            by_backend = {c.cell.backend: c for c in cells}
            base = by_backend.get(baseline)
            base_ok = base is not None and not _why_not(base)
            for name, c in by_backend.items():
                stats, shown = c.stats, shown_stats(c)
                entry = Entry(
                    c.status,
                    median_ms=shown.median_ms if shown else None,
                    disturbed=c.status == "disturbed",
                )
                why = _why_not(c)
                if why:
                    entry.reason = why
                elif not base_ok:
                    entry.reason = (
                        f"{baseline} not measured on this workload"
                        if base is None
                        else f"{baseline} was {base.status}: no baseline"
                    )
                else:
                    assert base is not None and base.stats is not None and stats is not None
                    if c.status not in TRUSTED_STATUSES:
                        entry.indicative, entry.reason = True, _status_reason(c)
                    elif base.status not in TRUSTED_STATUSES:
                        entry.indicative = True
                        entry.reason = f"{baseline} was {base.status}: ratio indicative"
                    entry.speedup = _ratio(base.stats.median_ms, stats.median_ms)
                    mem, base_mem = c.peak_memory, base.peak_memory
                    if mem and base_mem:
                        entry.cpu_memory = _ratio(
                            mem.peak_over_baseline_bytes, base_mem.peak_over_baseline_bytes
                        )
                        if c.cell.device == "cuda":
                            entry.device_memory = _ratio(
                                mem.allocator_peak_bytes, base_mem.allocator_peak_bytes
                            )
                row.entries[name] = entry
            rows[key] = row
    out = list(rows.values())
    measured = {r.label for r in out}
    for label in expected:
        if label not in measured:
            out.append(
                Row(
                    label=label,
                    model=label.split(" ")[0],
                    mode="infer",
                    device="",
                    entries={b: Entry("missing", "no stored run of this model") for b in backends},
                )
            )
    order = {label: i for i, label in enumerate(expected)}
    out.sort(key=lambda r: (r.mode != "infer", order.get(r.label, len(order))))
    modes = list(dict.fromkeys(r.mode for r in out)) or ["infer"]
    modes.sort(key=lambda m: m != "infer")
    for r in out:  # every row names every backend: a gap is a status, not a blank
        for b in backends:
            r.entries.setdefault(b, Entry("missing", "not in the stored run"))
    return SuiteSummary(title=title, backends=backends, rows=out, modes=modes, baseline=baseline)


class StoredSuite(NamedTuple):
    """What a store holds of a suite."""

    runs: list[RunResult]  # each entry's latest run, in the file's order
    labels: list[str]  # every entry's, with the workload its run learned where it has one
    missing: list[str]  # the labels of the entries with no stored run


def stored_runs(suite: Suite, db: str | Path) -> StoredSuite:
    """The stored run of each entry of `suite`, every entry's label, and the labels of the
    entries with none.

    Read from the store alone: no probe, nothing of the machine reading it. A run is an
    entry's when its stored spec is the entry's but for what the machine that ran it filled
    in: the workloads its probe learned, and the thread count (a suite that leaves threads
    out runs on every CPU there). The same suite measured on several machines (a merged
    store): each entry's latest run is shown, wherever it ran (its environment is in the
    report), as a rerun would replace an earlier one.
    """
    from stackcost.store.database import Store
    from stackcost.store.runs import RunResult

    wanted = [_entry_key(spec.model_dump(mode="json")) for spec in suite.specs]
    latest: dict[str, str] = {}
    with Store(db, read_only=True) as store:
        for run_id in store.run_ids():  # by start time: a later run replaces an earlier one
            row = store.run_row(run_id)
            key = _entry_key(json.loads(row["spec_json"])) if row is not None else None
            if key in wanted:
                latest[key] = run_id
        found = {k: RunResult.from_store(store, run_id) for k, run_id in latest.items()}
    labels, missing = [], []
    for spec, key in zip(suite.specs, wanted, strict=True):
        run = found.get(key) if key is not None else None
        if run is None:
            labels.append(workload_label_of_spec(spec))
            missing.append(labels[-1])
        else:  # with the workload its run learned: the sizes the file leaves to the model
            spec = spec.model_copy(update={"learned": run.spec.get("learned", {})})
            labels.append(workload_label_of_spec(spec))
    runs = [found[k] for k in wanted if k is not None and k in found]
    return StoredSuite(runs, labels, missing)


def _entry_key(spec: dict[str, Any]) -> str | None:
    """What a suite entry asks for, as its stored spec says it: without the probe's learned
    workloads and the thread count; None for a spec no suite writes (a training run's)."""
    from pydantic import ValidationError

    from stackcost.spec.run import RunSpec

    try:
        fields = RunSpec.model_validate(spec).model_dump(
            mode="json", exclude={"learned", "threads"}
        )
    except ValidationError:
        return None
    return json.dumps(fields, sort_keys=True)
