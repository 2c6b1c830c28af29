"""A suite's summary, computed from stored RunResults alone: speedup and memory vs eager.

Per workload, eager median / backend median (speedup), peak RSS over baseline backend /
eager (CPU memory) and allocator peak backend / eager (device memory, CUDA only); per
backend, the geometric mean over workloads, saying over how many it is taken. Only cells
whose every repetition is `ok`, their medians agreeing to the protocol's target (trusted:
CellResult.status), and verified against the eager reference, over an eager cell that is
too, enter the means; every other (workload, backend) pair is listed with its status and
reason. An `unstable` cell is kept as indicative, marked "?" and averaged in a
second, indicative mean, never in the first.

Each precision's rows are their own group (an int8 cell is compared with eager at int8,
and averaged with int8 cells only). A quantized row also gives, per backend, that
backend's fp32 median over its own on the same workload (batch, sizes, threads, device):
what quantizing buys on that rung, under the same rules (both cells ok and verified;
unstable ones indicative; the rest counted and named, never averaged in).

Below the numbers, the words both views of a summary say: the terminal's
(terminal/suite.py) and the page's (html/suite.py).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from stackcost.axes import PRECISIONS, QUANTIZED
from stackcost.backends import BASELINE
from stackcost.report.marks import (
    DISTURBED_MARK,
    STATUS_STYLE,
    UNTRUSTED_BASE_MARK,
    shown_stats,
)
from stackcost.report.units import ms
from stackcost.result import TRUSTED_STATUSES, VALID_STATUSES, headline
from stackcost.runspec.suite import (
    Expected,
    Suite,
    precision_label,
    workload_label,
    workload_label_of_spec,
)

if TYPE_CHECKING:
    from stackcost.store.runs import CellResult, RunResult


# Why an ok cell gives no ratio when its outputs were not checked against eager fp32's.
UNVERIFIED = "not verified against the eager reference"


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
        return "unverified" if self.reason == UNVERIFIED else "no baseline"


@dataclass
class Row:
    """One workload (a suite entry): eager's cell and every backend's."""

    label: str
    model: str
    mode: str
    device: str
    domain: str = ""
    entries: dict[str, Entry] = field(default_factory=dict)  # backend -> entry (eager too)
    precision: str = "fp32"
    workload: str = ""  # the label without the precision: 'resnet50 b1 224 px'
    # A quantized row's: backend -> that backend's fp32 on this workload over this cell
    # (speedup = fp32 median / this median, cpu_memory = this / fp32). Empty otherwise.
    versus_fp32: dict[str, Entry] = field(default_factory=dict)


@dataclass
class Geomean:
    value: float | None  # None when no workload counts
    n: int  # workloads it is taken over
    of: int  # workloads in the summary (of this mode)


def _geomean(entries: Sequence[Entry | None], metric: str, indicative: bool) -> Geomean:
    """Geometric mean of `metric` over the entries whose ratio counts (with `indicative`,
    the indicative ones too), saying over how many of all of them."""
    from scipy.stats import gmean

    values = [
        v
        for e in entries
        if e is not None
        and (e.counted or (indicative and e.indicative))
        and (v := getattr(e, metric)) is not None
        and math.isfinite(v)
        and v > 0
    ]
    return Geomean(float(gmean(values)) if values else None, len(values), len(entries))


@dataclass
class SuiteSummary:
    title: str  # the suite's name; "" for runs that are no named suite's
    backends: list[str]  # eager first
    rows: list[Row]
    modes: list[str]  # "infer", and "train" where train cells exist
    baseline: str = BASELINE

    @property
    def groups(self) -> list[tuple[str, str]]:
        """(mode, precision) of each table: a precision's rows are averaged together only."""
        found = {(r.mode, r.precision) for r in self.rows}
        return sorted(found, key=lambda g: (self.modes.index(g[0]), _precision_order(g[1])))

    def rows_of(self, mode: str, precision: str | None = None) -> list[Row]:
        """The rows of `mode` (at `precision`; None: at every precision)."""
        return [
            r
            for r in self.rows
            if r.mode == mode and (precision is None or r.precision == precision)
        ]

    def geomean(
        self,
        mode: str,
        backend: str,
        metric: str = "speedup",
        indicative: bool = False,
        precision: str | None = None,
    ) -> Geomean:
        """Geometric mean of `metric` (speedup, cpu_memory, device_memory) over the
        workloads of `mode` (and `precision`) where the backend's ratio counts; with
        `indicative`, over those where it is indicative (unstable) too."""
        rows = self.rows_of(mode, precision)
        return _geomean([r.entries.get(backend) for r in rows], metric, indicative)

    def not_counted(self, mode: str, precision: str | None = None) -> list[tuple[Row, str, Entry]]:
        """Every (workload, backend) left out of the means, with its status and reason
        (indicative ones too: they are in the indicative mean only)."""
        return [
            (r, b, r.entries[b])
            for r in self.rows_of(mode, precision)
            for b in self.backends
            if not r.entries[b].counted
        ]

    def quantized(self, mode: str) -> list[str]:
        """The quantized precisions with rows in `mode`, in the axis' order."""
        return [p for m, p in self.groups if m == mode and p in QUANTIZED]

    def versus_fp32(
        self,
        mode: str,
        precision: str,
        backend: str,
        metric: str = "speedup",
        indicative: bool = False,
    ) -> Geomean:
        """Geometric mean over the workloads of (`mode`, `precision`) of the backend's fp32
        median over its quantized one (`metric` speedup; cpu_memory: quantized / fp32),
        where both cells count; `of` is every workload asked at that precision."""
        rows = self.rows_of(mode, precision)
        return _geomean([r.versus_fp32.get(backend) for r in rows], metric, indicative)

    def not_versus_fp32(self, mode: str, precision: str, backend: str) -> list[tuple[Row, Entry]]:
        """The workloads of (`mode`, `precision`) where the backend's ratio to its fp32 is
        left out of the mean (indicative ones too), with status and reason."""
        return [
            (r, e)
            for r in self.rows_of(mode, precision)
            if not (e := r.versus_fp32.get(backend) or Entry("missing", "not run")).counted
        ]

    @property
    def has_indicative(self) -> bool:
        return any(e.indicative for r in self.rows for e in r.entries.values())

    @property
    def has_device_memory(self) -> bool:
        return any(e.device_memory is not None for r in self.rows for e in r.entries.values())


def _precision_order(precision: str) -> int:
    return PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS)


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
        return UNVERIFIED
    if c.stats is None:
        return "no timing stored"
    return ""


def _ratio(top: float | int | None, bottom: float | int | None) -> float | None:
    if top is None or bottom is None or top <= 0 or bottom <= 0:
        return None
    return top / bottom


def _group_key(cell: Any) -> tuple:
    """The workload and placement: everything but the backend, as (column, value) pairs."""
    return tuple((k, v) for k, v in cell.flat().items() if k != "backend") + (
        ("config", tuple(sorted(cell.model.config.items()))),
    )


def _at_fp32(key: tuple) -> tuple:
    """The same workload and placement at fp32: a quantized cell's own baseline."""
    return tuple((k, "fp32" if k == "precision" else v) for k, v in key)


def summarize(
    runs: Sequence[RunResult],
    title: str = "",
    expected: Sequence[Expected | str] = (),
    baseline: str = BASELINE,
) -> SuiteSummary:
    """The suite summary of stored runs: one row per workload and precision (a later run's
    row replaces an earlier one's); `expected` rows (a label alone: a workload at fp32)
    with no stored run are rows too, with every backend "missing", so a model never drops
    out silently."""
    backends: list[str] = [baseline]
    groups: dict[tuple, tuple[RunResult, dict[str, CellResult]]] = {}
    for run in runs:
        for b in [*run.spec.get("backends", []), *(c.backend for c, _ in run.records)]:
            if b not in backends:
                backends.append(b)
        found: dict[tuple, dict[str, CellResult]] = {}
        for c in run.cells():
            found.setdefault(_group_key(c.cell), {})[c.cell.backend] = c
        for key, by_backend in found.items():
            groups[key] = (run, by_backend)
    rows: list[Row] = []
    for key, (run, by_backend) in groups.items():
        row = _row(run, by_backend, baseline)
        if row.precision in QUANTIZED:  # each backend against its own fp32 cell
            fp32 = groups.get(_at_fp32(key), (run, {}))[1]
            for name, c in by_backend.items():
                row.versus_fp32[name] = _versus_fp32(c, fp32.get(name))
        rows.append(row)
    wanted = [e if isinstance(e, Expected) else Expected(e) for e in expected]
    measured = {r.label for r in rows}
    for e in wanted:
        if e.label not in measured:
            rows.append(
                Row(
                    label=e.label,
                    model=e.workload.split(" ")[0],
                    mode="infer",
                    device="",
                    precision=e.precision,
                    workload=e.workload,
                    entries={b: Entry("missing", "no stored run of this model") for b in backends},
                )
            )
    order = {e.label: i for i, e in enumerate(wanted)}
    rows.sort(key=lambda r: (r.mode != "infer", order.get(r.label, len(order))))
    modes = list(dict.fromkeys(r.mode for r in rows)) or ["infer"]
    modes.sort(key=lambda m: m != "infer")
    for r in rows:  # every row names every backend: a gap is a status, not a blank
        for b in backends:
            r.entries.setdefault(b, Entry("missing", "not in the stored run"))
            if r.precision in QUANTIZED:
                r.versus_fp32.setdefault(b, Entry("missing", r.entries[b].reason))
    return SuiteSummary(title=title, backends=backends, rows=rows, modes=modes, baseline=baseline)


def _row(run: RunResult, by_backend: dict[str, CellResult], baseline: str) -> Row:
    """One workload at one precision: each backend's cell against the baseline's."""
    from stackcost import zoo

    first = next(iter(by_backend.values())).cell
    workload = zoo.MODELS.get(first.model.name)
    learned = run.spec.get("learned", {}).get(first.model.name, {})
    label = workload_label(
        first.model.name, first.batch_size, first.size_label(), first.model.config
    )
    row = Row(
        label=precision_label(label, first.precision),
        model=first.model.name,
        mode=first.mode,
        device=first.device,
        domain=workload.domain if workload else str(learned.get("domain", "")),
        precision=first.precision,
        workload=label,
    )
    base = by_backend.get(baseline)
    base_ok = base is not None and not _why_not(base)
    for name, c in by_backend.items():
        shown = shown_stats(c)
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
            assert base is not None
            _ratios(entry, c, base, baseline)
        row.entries[name] = entry
    return row


def _versus_fp32(c: CellResult, fp32: CellResult | None) -> Entry:
    """A quantized cell against the same backend's fp32 cell on the same workload."""
    entry = Entry(c.status)
    why = _why_not(c)
    if why:
        entry.reason = why
    elif fp32 is None:
        entry.reason = "fp32 not measured on this workload and backend"
    elif _why_not(fp32):
        entry.reason = f"fp32 was {fp32.status}: no baseline"
        if fp32.status == "ok":  # ok yet no ratio: its outputs were not verified
            entry.reason = f"fp32 {_why_not(fp32)}: no baseline"
    else:
        _ratios(entry, c, fp32, "fp32")
    return entry


def _ratios(entry: Entry, c: CellResult, base: CellResult, base_name: str) -> None:
    """Fill `entry`'s ratios of cell `c` to `base` (both give a valid, verified timing):
    indicative where either is untrusted."""
    assert base.stats is not None and c.stats is not None
    if c.status not in TRUSTED_STATUSES:
        entry.indicative, entry.reason = True, _status_reason(c)
    elif base.status not in TRUSTED_STATUSES:
        entry.indicative = True
        entry.reason = f"{base_name} was {base.status}: ratio indicative"
    entry.speedup = _ratio(base.stats.median_ms, c.stats.median_ms)
    mem, base_mem = c.peak_memory, base.peak_memory
    if mem and base_mem:
        entry.cpu_memory = _ratio(mem.peak_over_baseline_bytes, base_mem.peak_over_baseline_bytes)
        if c.cell.device == "cuda":
            entry.device_memory = _ratio(mem.allocator_peak_bytes, base_mem.allocator_peak_bytes)


class StoredSuite(NamedTuple):
    """What a store holds of a suite."""

    runs: list[RunResult]  # each entry's latest run, in the file's order
    labels: list[str]  # every entry's, with the workload its run learned where it has one
    missing: list[str]  # the labels of the entries with no stored run
    expected: list[Expected]  # every row the summary should have: each label at each precision


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
    expected = [Expected(label, p) for label in labels for p in suite.precisions]
    return StoredSuite(runs, labels, missing, expected)


def _entry_key(spec: dict[str, Any]) -> str | None:
    """What a suite entry asks for, as its stored spec says it: without the probe's learned
    workloads and the thread count; None for a spec no suite writes (a training run's)."""
    from pydantic import ValidationError

    from stackcost.runspec.run import RunSpec

    try:
        fields = RunSpec.model_validate(spec).model_dump(
            mode="json", exclude={"learned", "threads"}
        )
    except ValidationError:
        return None
    return json.dumps(fields, sort_keys=True)


# -- how the summary reads: the words the terminal (terminal/suite.py) and the page
# (html/suite.py) both say ------------------------------------------------------------------


METRICS = {
    "speedup": "speedup",
    "cpu_memory": "CPU memory",
    "device_memory": "device memory",
}


MODE_NAMES = {"infer": "inference", "train": "training"}


def times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def shows_precision(summary: SuiteSummary, precision: str) -> bool:
    """A table names its precision unless every table is fp32 (the suites before)."""
    return precision != "fp32" or len(summary.groups) > len(summary.modes)


def _versus(value: float | None, precision: str) -> str:
    """A geomean of fp32 / quantized, read out: a value below 1 says slower, in words."""
    if value is None:
        return "no geomean"
    if value > 1:
        return f"{value:.2f}× geomean, faster than fp32"
    if value < 1:
        return (
            f"{value:.2f}× geomean, slower than fp32 ({precision} takes {1 / value:.2f}× its time)"
        )
    return f"{value:.2f}× geomean, as fast as fp32"


def versus_line(summary: SuiteSummary, mode: str, precision: str, backend: str) -> str:
    """'int8 on onnxruntime: 1.70× geomean, faster than fp32, over 3 of 4 models;
    1 unsupported: bert-base b1 128 tokens (why)'."""
    g = summary.versus_fp32(mode, precision, backend)
    text = f"{precision} on {backend}: {_versus(g.value, precision)}, over {g.n} of {g.of} models"
    wide = summary.versus_fp32(mode, precision, backend, indicative=True)
    if wide.n > g.n:
        text += f" ({times(wide.value)}{UNTRUSTED_BASE_MARK} over {wide.n} with unstable ones)"
    left: dict[str, list[str]] = {}
    for r, e in summary.not_versus_fp32(mode, precision, backend):
        kind = "indicative" if e.indicative else e.shown
        why = f" ({e.reason})" if e.reason and e.reason != e.status else ""
        left.setdefault(kind, []).append(f"{r.workload or r.label}{why}")
    for kind, names in left.items():
        text += f"; {len(names)} {kind}: {', '.join(names)}"
    return text


def mean_text(
    summary: SuiteSummary,
    mode: str,
    backend: str,
    metric: str,
    cuda: bool,
    precision: str | None = None,
) -> str:
    """'1.42× over 2/6', '— over 0/6' when no workload counts, then, where unstable
    cells add to it, the indicative mean: '1.42× over 2/6 · 1.30×? over 6/6'; '—' for
    device memory where nothing ran on a GPU."""
    if metric == "device_memory" and not cuda:
        return "—"
    g = summary.geomean(mode, backend, metric, precision=precision)
    text = f"{times(g.value)} over {g.n}/{g.of}"
    wide = summary.geomean(mode, backend, metric, indicative=True, precision=precision)
    if wide.n > g.n:
        text += f" · {times(wide.value)}{UNTRUSTED_BASE_MARK} over {wide.n}/{wide.of}"
    return text


def entry_text(e: Entry, metric: str, device: str) -> tuple[str, str]:
    """(text, rich style) of one backend on one workload for `metric`."""
    if e.speedup is None:  # no ratio: the status says why (listed below the tables)
        return e.shown, STATUS_STYLE.get(e.status, "red") if e.status != "ok" else "yellow"
    if metric == "device_memory" and device != "cuda":
        return "—", "dim"
    if e.indicative:
        return times(getattr(e, metric)) + UNTRUSTED_BASE_MARK, "yellow"
    return times(getattr(e, metric)), ""


def median_text(e: Entry) -> str:
    if e.median_ms is None:
        return "—"
    return ms(e.median_ms) + (DISTURBED_MARK if e.disturbed else "")


def no_baseline_note(summary: SuiteSummary, precision: str, rows: list[Row]) -> str:
    """Where the baseline has no cell to compare with at a quantized precision (eager has
    no static int8), why, in one line instead of tables of "no baseline": each rung is
    compared with its own fp32 instead. "" where it has one."""
    b = summary.baseline
    if precision not in QUANTIZED or any(r.entries[b].speedup is not None for r in rows):
        return ""
    entries = [r.entries[b] for r in rows]
    why = Counter(
        f"{e.status} — {e.reason}" if e.reason and e.reason != e.status else e.status
        for e in entries
    )
    said = "; ".join(f"{n} {what}" for what, n in why.items())
    return (
        f"no table vs {b}: {b} gives no {precision} baseline on any model ({said}); "
        f"each backend is compared with its own fp32 below"
    )


def explain(summary: SuiteSummary) -> list[str]:
    b = summary.baseline
    quantized = list(dict.fromkeys(p for m in summary.modes for p in summary.quantized(m)))
    return [
        f"speedup = {b} median / backend median (higher is faster); CPU memory = peak RSS "
        f"over the worker's baseline, backend / {b}; device memory = allocator peak, "
        f"backend / {b} (CUDA only, — on CPU); lower memory is leaner.",
        f"Geometric means over the workloads where both the backend and {b} are ok "
        "(every repetition) and verified; everything else is listed with its status.",
        *(
            [
                f"{UNTRUSTED_BASE_MARK} indicative: the backend or {b} is unstable (verified, "
                "timed on a quiet machine, but its median's CI is wider than the protocol "
                "asked, or its repetitions' medians disagree beyond it); the "
                f"{UNTRUSTED_BASE_MARK} mean takes these ratios in too."
            ]
            if summary.has_indicative
            else []
        ),
        *(
            [
                f"{' / '.join(quantized)} vs fp32 = a backend's fp32 median / its quantized "
                "median on the same workload (batch, sizes, threads): above 1× quantizing made "
                "that rung faster, below 1× slower. Geometric means over the models where both "
                "cells are ok and verified (a quantized one by its precision's acceptance "
                "rule); every other model is counted and named beside the mean."
            ]
            if quantized
            else []
        ),
    ]


def means_name(summary: SuiteSummary, mode: str, precision: str) -> str:
    """'inference means', 'inference int8 means' where precisions are several or not fp32."""
    name = MODE_NAMES.get(mode, mode)
    if shows_precision(summary, precision):
        name += f" {precision}"
    return f"{name} means"
