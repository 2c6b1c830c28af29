"""What the "where the time goes" views read (the page's section, html/costs/, and the
figures, figures/costs.py): the profiled cells (Row), the roofs they sit under, their power
against throughput, and thread scaling from any run measured at several thread counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from stackcost.cell import Cell
from stackcost.measure.gpu_peaks import GpuPeaks
from stackcost.measure.peaks import Peaks, cell_peaks, percent_of_peak
from stackcost.report.frames import tidy
from stackcost.report.frames.tidy import machine_of
from stackcost.result import RepetitionResult
from stackcost.store.runs import CellResult, RunResult


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


def profiled(c: CellResult) -> RepetitionResult | None:
    """The cell's last valid repetition that carries profile data, if any."""
    reps = [
        r
        for r in c.repetitions
        if r.valid and (r.work or r.breakdown or r.telemetry or r.profile_notes or r.host_copies)
    ]
    return reps[-1] if reps else None


def collect(runs: list[RunResult], summ: pd.DataFrame | None = None) -> list[Row]:
    """Every valid cell with profile data, sorted by workload then series.

    `summ` is tidy.summary of the same runs: it supplies the series names (so colours
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


# -- the roofline: each profiled cell under its machine's measured peaks -----------------


def roof(intensity: float, peak_gflops: float, stream_gbs: float) -> float:
    """The roofline's ceiling at `intensity` FLOP/byte: min(compute peak, bandwidth × I)."""
    return min(peak_gflops, intensity * stream_gbs)


@dataclass(frozen=True)
class Roof:
    where: str  # "2 threads" on a CPU; the GPU's name on cuda
    precision: str
    peak_gflops: float
    stream_gbs: float
    runs: tuple[str, ...]

    def label(self, with_runs: bool) -> str:
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        runs = f" (run {', '.join(self.runs)})" if with_runs else ""
        peak = (
            f"{self.peak_gflops / 1e3:,.1f} TFLOP/s"
            if self.peak_gflops >= 10_000
            else f"{self.peak_gflops:,.0f} GFLOP/s"
        )
        return f"roof, {self.where}{prec}: {peak}, {self.stream_gbs:,.1f} GB/s{runs}"

    def points(self, lo: float, hi: float) -> tuple[list[float], list[float]]:
        """The roof from intensity lo to hi: straight segments on log-log axes, so the
        ends and the ridge point are all it takes."""
        ridge = self.peak_gflops / self.stream_gbs
        xs = [lo, *([ridge] if lo < ridge < hi else []), hi]
        return xs, [roof(x, self.peak_gflops, self.stream_gbs) for x in xs]


def where(r: Row) -> str:
    """Whose peaks hold a row: its thread count on a CPU, its GPU on cuda."""
    if r.cell.device != "cpu":
        name = getattr(r.peaks, "name", None)
        return f"{name} ({r.cell.device})" if name else r.cell.device
    return f"{r.cell.threads} thread{'s' if r.cell.threads != 1 else ''}"


def roofs(rows: list[Row]) -> list[Roof]:
    """One roof per (thread count or GPU, precision) the points use; runs that measured the
    same peaks share it, runs whose peaks differ get their own (labelled with the run)."""
    groups: dict[tuple, list[str]] = {}
    for r in rows:
        peak = r.peak_gflops
        if peak is None or r.peaks is None or r.peaks.stream_gbs <= 0:
            continue
        order = (r.cell.device != "cpu", r.cell.threads)
        key = (order, where(r), r.cell.precision, peak, r.peaks.stream_gbs)
        if r.run_id not in groups.setdefault(key, []):
            groups[key].append(r.run_id)
    return [
        Roof(w, p, peak, bw, tuple(ids))
        for (_, w, p, peak, bw), ids in sorted(groups.items(), key=lambda kv: kv[0][:3])
    ]


def rep_intensity(rep: RepetitionResult) -> float | None:
    w = rep.work
    if w is None or w.flops <= 0 or w.bytes <= 0:
        return None
    return w.flops / w.bytes


# -- power against throughput ------------------------------------------------------------


def energy_points(rows: list[Row]) -> pd.DataFrame:
    """One row per cell with an energy: throughput (samples/s) and power (W), per method."""
    recs = []
    for r in rows:
        e = r.rep.energy
        if e is None:
            continue
        tput = r.rep.throughput
        if tput is None and e.seconds > 0:
            tput = e.samples / e.seconds
        recs.append(
            {
                "series": r.series,
                "machine": r.machine,
                "workload": r.workload,
                "batch_size": r.cell.batch_size,
                "group": f"{r.series} · {e.device} · {e.method}",
                "device": e.device,
                "method": e.method,
                "source": e.source,
                "note": e.note,
                "throughput": tput,
                "watts": e.watts,
                "samples_per_joule": e.samples_per_joule,
                "joules_per_sample": e.joules_per_sample,
                "row": r,
            }
        )
    return pd.DataFrame(recs)


# -- thread scaling (no profile needed) -----------------------------------------------------

# "sizes" ("224 px", "128 tokens", ""): one key for every size axis, never NaN.
SCALING_AXES = ("model", "mode", "batch_size", "sizes", "precision", "device", "init")
UNSTABLE_BASE = "(base unstable?)"


def scaling_frame(summ: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, series) measured at two or more thread counts: the speedup of each
    thread count over the smallest, from median latencies of valid cells. base_trusted is
    False where a cell at the smallest count was unstable: those speedups are marked."""
    cols = [
        *SCALING_AXES,
        *tidy.size_columns(summ),  # for labels: "res 32 px", "seq len 128 tokens"
        "series",
        "threads",
        "median_ms",
        "base_threads",
        "base_trusted",
        "speedup",
        "ideal",
    ]
    if summ is None or summ.empty:
        return pd.DataFrame(columns=cols)
    valid = summ[summ["valid"] & summ["median_ms"].notna()]
    parts = []
    for _, grp in valid.groupby([*SCALING_AXES, "series"], sort=False):
        # Two runs of the same series and workload at one thread count: their median.
        g = (
            grp.groupby("threads", as_index=False)
            .agg(median_ms=("median_ms", "median"), trusted=("trusted", "all"))
            .sort_values("threads")
        )
        if len(g) < 2:
            continue
        base_t, base_ms = int(g["threads"].iloc[0]), float(g["median_ms"].iloc[0])
        first = grp.iloc[0]
        g = g.assign(
            **{a: first[a] for a in [*SCALING_AXES, *tidy.size_columns(summ), "series"]},
            base_threads=base_t,
            base_trusted=bool(g["trusted"].iloc[0]),
            speedup=base_ms / g["median_ms"],
            ideal=g["threads"] / base_t,
        )
        parts.append(g)
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]
