"""The profiled cells the cost panels draw (Row), and what every panel returns (Panel)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from stackcost.cell import Cell
from stackcost.measure.gpu_peaks import GpuPeaks
from stackcost.measure.peaks import Peaks, cell_peaks, percent_of_peak
from stackcost.report.plots import escape_label
from stackcost.report.profile_table import profiled
from stackcost.report.study import machine_of
from stackcost.report.style import PALETTE
from stackcost.result import RepetitionResult
from stackcost.store.runs import RunResult


@dataclass
class Panel:
    """One figure of the section: the figure, or None and a note saying why not.

    `note` is shown under the figure (or in its place); `notes` are per-cell remarks
    listed under it (what could not be profiled, busy machines, missing fits).
    """

    fig: go.Figure | None
    note: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Row:
    """One valid profiled cell: the repetition carrying its profile, and its context."""

    run_id: str
    cell: Cell
    series: str  # the legend name the rest of the report uses (raw, not escaped)
    workload: str  # model · batch · sizes (with units) · threads (+ axes that vary), raw
    rep: RepetitionResult
    # From the run's env: a CPU cell's measured at its thread count, a cuda cell's its GPU's.
    peaks: Peaks | GpuPeaks | None
    median_ms: float | None = None  # median over repetitions, as in the other sections
    throughput: float | None = None  # samples/s, median over repetitions
    machine: str = ""  # host and CPU (or GPU) of the run's environment

    @property
    def label(self) -> str:
        return f"{self.series} · {self.workload}"

    @property
    def peak(self) -> tuple[str, float] | None:
        """(which peak, GFLOP/s) the cell is held to: its precision's, on its device."""
        return None if self.peaks is None else self.peaks.peak(self.cell.precision)

    @property
    def peak_gflops(self) -> float | None:
        return None if self.peak is None else self.peak[1]

    @property
    def percent_of_peak(self) -> float | None:
        if self.rep.achieved_gflops is None or self.peaks is None:
            return None
        return percent_of_peak(self.rep.achieved_gflops, self.peaks, self.cell.precision)


_EXTRA_AXES = {
    "mode": "{}",
    "precision": "{}",
    "device": "{}",
    "init": "init {}",
}


def _workload(cell: Cell, extra: list[str]) -> str:
    sizes = [cell.size_label()] if cell.sizes else []  # "224 px", "128 tokens"
    parts = [cell.model.name, f"b{cell.batch_size}", *sizes, f"{cell.threads} thr"]
    flat = cell.flat()
    parts += [_EXTRA_AXES[a].format(flat[a]) for a in extra]
    return " · ".join(parts)


def _sort_key(row: Row, order: list[str]) -> tuple:
    c = row.cell
    rank = order.index(row.series) if row.series in order else len(order)
    workload = (c.model.name, c.mode, c.precision, c.device, tuple(c.sizes.items()), c.threads)
    return (*workload, c.batch_size, rank, row.run_id)


def collect(runs: list[RunResult], summ: pd.DataFrame | None = None) -> list[Row]:
    """Every valid cell with profile data, sorted by workload then series.

    `summ` is data.summary of the same runs: it supplies the series names (so colours
    match the rest of the report) and the cells' median latency and throughput.
    """
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    order: list[str] = []
    if summ is not None and len(summ):
        for r in summ.to_dict("records"):
            by_key[(r["run_id"], r["cell_key"])] = r
        order = list(dict.fromkeys(summ["series"]))
    found: list[tuple[RunResult, Any, RepetitionResult]] = []
    for run in runs:
        for c in run.cells():
            if not c.valid:
                continue
            rep = profiled(c)
            if rep is not None:
                found.append((run, c, rep))
    extra = [
        a for a in _EXTRA_AXES if len({c.cell.flat()[a] for _, c, _ in found}) > 1
    ]  # only the axes that vary get a place in the label
    rows = []
    for run, c, rep in found:
        s = by_key.get((run.run_id, c.cell.key()), {})
        median = s.get("median_ms")
        tput = s.get("throughput_per_s")
        rows.append(
            Row(
                run_id=run.run_id,
                cell=c.cell,
                series=s.get("series") or c.cell.backend,
                workload=_workload(c.cell, extra),
                rep=rep,
                peaks=cell_peaks((run.env or {}).get("peaks"), c.cell.device, c.cell.threads),
                machine=machine_of(run.env),
                median_ms=None if median is None or pd.isna(median) else float(median),
                throughput=None if tput is None or pd.isna(tput) else float(tput),
            )
        )
    return sorted(rows, key=lambda r: _sort_key(r, order))


def series_color(colors: dict[str, str], series: str) -> str:
    return colors.get(series) or PALETTE[sum(map(ord, series)) % len(PALETTE)]


def workload_axis(rows: list[Row]) -> list[list[str]]:
    """A two-level category axis: workload outside, series inside (escaped)."""
    return [[escape_label(r.workload) for r in rows], [escape_label(r.series) for r in rows]]
