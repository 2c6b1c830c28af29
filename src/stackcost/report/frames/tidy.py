"""Tidy frames behind every report view: repetitions, per-cell aggregates, baseline ratios.

Rule enforced here, so no view can break it: a timing exists only for a valid cell
("ok" or "unstable"). A cell whose worst repetition is "wrong", failed or skipped carries
its status, reason and error, never a latency, throughput, cold start or ratio. A
"disturbed" cell's timing is kept apart, in marked_* columns, which no plot, pool or ratio
reads; a ratio carries its baseline's status (base_status), trusted only when "ok"
(see report/marks.py for how views show both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from stackcost.axes import GRID_AXES, GRID_COLUMNS
from stackcost.backends import BASELINE
from stackcost.measure.stats import between_spread, repetition_interval, spread_reason
from stackcost.report.frames import quant
from stackcost.result import MEASURED_STATUSES, TRUSTED_STATUSES, VALID_STATUSES
from stackcost.store.runs import RunResult
from stackcost.workload import SIZE_AXES

MIB = 2**20

# A cell's size axes ("resolution" px, "seq_len" tokens, "samples"): one column each, for
# the cells that have it (blank, <NA>, for the others). Groupings use "sizes" instead, the
# sizes with their units ("224 px", "128 tokens", "" for none): one key, never NaN, so no
# groupby drops a cell because its model has no resolution.
SIZE_COLUMNS: tuple[str, ...] = tuple(SIZE_AXES)

# Everything that defines a workload except the backend: the key of a baseline group.
WORKLOAD_AXES = ("model", "mode", "batch_size", "sizes", *GRID_COLUMNS, "init")
# Axes a figure holds fixed while sweeping one of them.
CONDITION_AXES = ("mode", "batch_size", "sizes", *GRID_COLUMNS, "init")

# Worst first wins when repetitions of one cell disagree. Unknown statuses (added by a
# newer stackcost) rank worst: an unrecognised status must never pass as a timing.
SEVERITY = {
    "ok": 0,
    "unstable": 1,
    "disturbed": 2,
    "unsupported": 3,
    "unavailable": 4,
    "skipped": 5,
    "interrupted": 6,
    "timeout": 7,
    "oom": 8,
    "failed": 9,
    "crashed": 10,
    "wrong": 11,
}
UNKNOWN_SEVERITY = 99

TIMING_COLUMNS = (
    "median_ms",
    "mean_ms",
    "within_ci_low_ms",  # a repetition's own CI, over its iterations in one process
    "within_ci_high_ms",
    "p90_ms",
    "p99_ms",
    "iqr_ms",
    "min_ms",
    "max_ms",
    "cv",
    "n_samples",
    "throughput_per_s",
    "cold_start_ms",
    "startup_ms",
)
# A disturbed repetition's timings, apart from the valid ones so no pool can take them.
DISTURBED_COLUMNS = ("disturbed_median_ms", "disturbed_throughput_per_s")
NUMERIC_COLUMNS = (
    *TIMING_COLUMNS,
    "peak_rss_bytes",
    "peak_over_baseline_bytes",
    "allocator_peak_bytes",
    "max_abs_err",
    "max_rel_err",
    "tolerance",
    "prepare_s",
    "total_s",
    "others_cores",
    "target_ci",
    *DISTURBED_COLUMNS,
)
# A quantized cell's accuracy readout and weight sizes (frames/quant.py), per repetition and,
# aggregated to the worst repetition, per cell. Only those some repetition recorded are
# kept: a store from before quantization has none, and its views and exports are unchanged.
QUANT_AGGREGATES = {
    "top1": "min",  # share of rows whose argmax agrees with fp32's
    "kl": "max",  # mean softmax KL(fp32 || this), nats
    "agreement_rows": "min",
    "weight_bytes": "max",
    "fp32_weight_bytes": "max",
    "accuracy_drop_pt": "max",  # held-out accuracy below fp32's, points (stored heldout)
    "ppl_increase_pct": "max",  # held-out perplexity above eager fp32's, % (stored heldout)
}
QUANT_COLUMNS: tuple[str, ...] = tuple(QUANT_AGGREGATES)
CELL_TIMINGS = (
    "median_ms",
    "band_low_ms",
    "band_high_ms",
    "ci_low_ms",  # the cell's CI: a t-interval over its repetition medians (ci_method)
    "ci_high_ms",
    "throughput_per_s",
    "throughput_low_per_s",
    "throughput_high_per_s",
    "cold_start_ms",
    "startup_ms",
)
# What a disturbed cell shows, marked: its valid repetitions' if any, else its disturbed ones'.
MARKED_TIMINGS = ("marked_median_ms", "marked_throughput_per_s")
CELL_COLUMNS = (
    "run_id",
    "cell_key",
    "series",
    "model",
    "backend",
    "options",
    "mode",
    "batch_size",
    *SIZE_COLUMNS,  # only those some cell has are kept (see cell_columns)
    "sizes",
    *GRID_COLUMNS,
    "init",
    "status",
    "reason",
    "valid",
    "trusted",
    "n_repetitions",
    "n_valid",
    *CELL_TIMINGS,
    "ci_method",
    "spread_within",
    "spread_between",
    *MARKED_TIMINGS,
    "peak_rss_bytes",
    "allocator_peak_bytes",
    "max_rel_err",
    "tolerance",
    *QUANT_COLUMNS,  # only those some repetition recorded (see cell_columns)
    "log_tail",
)


def severity(status: str) -> int:
    return SEVERITY.get(status, UNKNOWN_SEVERITY)


def is_valid(status: str) -> bool:
    return status in VALID_STATUSES


def is_trusted(status: str) -> bool:
    return status in TRUSTED_STATUSES


def size_columns(df: pd.DataFrame) -> list[str]:
    """The size axes some row of `df` has, in SIZE_AXES order: ["resolution"] for image runs."""
    return [a for a in SIZE_COLUMNS if a in df and df[a].notna().any()]


def quant_columns(df: pd.DataFrame) -> list[str]:
    """The QUANT_COLUMNS `df` has: none for a store from before quantization."""
    return [c for c in QUANT_COLUMNS if c in df]


def cell_columns(df: pd.DataFrame) -> list[str]:
    """CELL_COLUMNS less the size axes no cell of `df` has and the quantization readouts
    no repetition recorded: an image run's are as ever."""
    present = {*size_columns(df), *quant_columns(df)}
    optional = {*SIZE_COLUMNS, *QUANT_COLUMNS}
    return [c for c in CELL_COLUMNS if c not in optional or c in present]


def _sort_axes(df: pd.DataFrame) -> list[str]:
    """CONDITION_AXES with the sizes as numbers (sorting "128 px" as text puts it first)."""
    sizes = size_columns(df)
    return [a for c in CONDITION_AXES for a in (sizes if c == "sizes" else [c])]


def _int_sizes(df: pd.DataFrame) -> pd.DataFrame:
    """Size columns as integers, blank where a cell has no such axis (not 224.0 and NaN)."""
    for a in size_columns(df):
        if df[a].isna().any():
            df[a] = df[a].astype("Int64")
    return df


def _options(opts: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(opts.items()))


def frame(runs: list[RunResult]) -> pd.DataFrame:
    """One row per repetition across all runs, with run_id, options, tolerance and a series.

    Timings of non-valid repetitions are blanked here too (cold start and startup are
    recorded even for a "wrong" repetition, but they are not valid timings).
    """
    parts = []
    for run in runs:
        if not run.records:
            continue
        df = run.to_dataframe()
        extra = pd.DataFrame(
            {
                "options": [_options(c.backend_options) for c, _ in run.records],
                "tolerance": [
                    r.verification.tolerance if r.verification else None for _, r in run.records
                ],
                "log_tail": [r.log_tail for _, r in run.records],
                # The protocol's target its repetitions settled to, and must agree to.
                "target_ci": [run.target_ci] * len(run.records),
                # Other processes' cores over the timed loop: why a repetition is disturbed.
                "others_cores": [
                    r.disturbance.others_cores if r.disturbance else None for _, r in run.records
                ],
                "disturbed_median_ms": [
                    r.stats.median_ms if r.status == "disturbed" and r.stats else None
                    for _, r in run.records
                ],
                "disturbed_throughput_per_s": [
                    r.throughput if r.status == "disturbed" else None for _, r in run.records
                ],
            }
        )
        readouts = pd.DataFrame(
            [quant.rep_columns(r, run.heldout_of(c)) for c, r in run.records],
            columns=list(QUANT_COLUMNS),
        )
        extra = pd.concat([extra, readouts], axis=1)
        extra = extra.drop(columns=[c for c in extra.columns if c in df.columns])
        parts.append(pd.concat([df.reset_index(drop=True), extra], axis=1))
    if not parts:
        return pd.DataFrame(
            columns=[
                "run_id",
                "cell_key",
                "series",
                "backend",
                "options",
                *WORKLOAD_AXES,
                "repetition",
                "status",
                "reason",
                "valid",
                "trusted",
                *NUMERIC_COLUMNS,
                "log_tail",
            ]
        ).astype({"valid": bool, "trusted": bool})
    df = _int_sizes(pd.concat(parts, ignore_index=True))
    # Readouts no repetition recorded leave the frame (older stores' exports stay as they were).
    df = df.drop(columns=[c for c in QUANT_COLUMNS if df[c].isna().all()])
    for col in (*NUMERIC_COLUMNS, *quant_columns(df)):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    df["reason"] = df["reason"].fillna("")
    df["valid"] = df["status"].map(is_valid)
    df["trusted"] = df["status"].map(is_trusted)
    df.loc[~df["valid"], list(TIMING_COLUMNS)] = np.nan
    df.insert(2, "series", _series(df))
    return df


def _series(df: pd.DataFrame) -> pd.Series:
    """The legend name: backend, its options, and the run when several runs share it."""
    name = df["backend"] + df["options"].map(lambda o: f" [{o}]" if o else "")
    runs_per_name = df.groupby(name)["run_id"].transform("nunique")
    return name.where(runs_per_name <= 1, name + " · " + df["run_id"])


def _worst(group: pd.DataFrame) -> pd.Series:
    ranks = group["status"].map(severity)
    worst = group.loc[ranks.idxmax()]
    reasons = group.loc[ranks == ranks.max(), "reason"]
    reason = next((r for r in reasons if r), "") or next((r for r in group["reason"] if r), "")
    tails = group.loc[ranks == ranks.max(), "log_tail"].fillna("")
    return pd.Series(
        {"status": worst["status"], "reason": reason, "log_tail": next((t for t in tails if t), "")}
    )


def _across_repetitions(group: pd.DataFrame) -> pd.Series:
    """The cell's CI over its valid repetitions' medians (measure.stats.repetition_interval:
    none below two), and why they disagree beyond the run's target ('' when they agree):
    the rule CellResult.status applies, on the frame."""
    medians = [float(m) for m in group.loc[group["valid"], "median_ms"].dropna()]
    interval = repetition_interval(medians)
    target = group["target_ci"].dropna()
    scenario = "scenario" in group and group["scenario"].notna().any()
    spread = "" if target.empty or scenario else spread_reason(medians, float(target.iloc[0]))
    # Where the time varies (measure.stats.spreads), from two valid repetitions on.
    windows = (
        group.loc[group["valid"], "window_spread"].dropna() if "window_spread" in group else []
    )
    two = len(medians) >= 2
    return pd.Series(
        {
            "ci_low_ms": interval.low_ms if interval else math.nan,
            "ci_high_ms": interval.high_ms if interval else math.nan,
            "ci_method": interval.method if interval else "",
            "spread_within": float(windows.mean()) if two and len(windows) else math.nan,
            "spread_between": (between_spread(medians) if two else None) or math.nan,
            "spread_reason": spread,
        }
    )


def cells(data: list[RunResult] | pd.DataFrame) -> pd.DataFrame:
    """One row per (run, cell): repetitions aggregated.

    median_ms is the median of the repetitions' medians; the band is their min and max
    (each repetition is a separate process, so the band shows process-to-process spread),
    and ci_low/high_ms the cell's CI over those medians (ci_method names it; none for one
    repetition, whose only CI is within-process: the frame's within_ci_*). An ok cell whose
    repetitions disagree beyond the run's target_ci is `unstable`, the reason saying so.
    """
    df = frame(data) if isinstance(data, list) else data
    if df.empty:
        return pd.DataFrame(columns=cell_columns(df)).astype({"valid": bool, "trusted": bool})
    keys = ["run_id", "cell_key"]
    g = df.groupby(keys, sort=False)
    out = g.agg(
        series=("series", "first"),
        model=("model", "first"),
        backend=("backend", "first"),
        options=("options", "first"),
        **{a: (a, "first") for a in (*CONDITION_AXES, *size_columns(df))},
        n_repetitions=("status", "size"),
        n_valid=("valid", "sum"),
        median_ms=("median_ms", "median"),
        band_low_ms=("median_ms", "min"),
        band_high_ms=("median_ms", "max"),
        throughput_per_s=("throughput_per_s", "median"),
        throughput_low_per_s=("throughput_per_s", "min"),
        throughput_high_per_s=("throughput_per_s", "max"),
        cold_start_ms=("cold_start_ms", "median"),
        startup_ms=("startup_ms", "median"),
        peak_rss_bytes=("peak_rss_bytes", "max"),
        allocator_peak_bytes=("allocator_peak_bytes", "max"),
        max_rel_err=("max_rel_err", "max"),
        tolerance=("tolerance", "max"),
        disturbed_median_ms=("disturbed_median_ms", "median"),
        disturbed_throughput_per_s=("disturbed_throughput_per_s", "median"),
        **{c: (c, QUANT_AGGREGATES[c]) for c in quant_columns(df)},
    )
    worst = pd.DataFrame({k: _worst(grp) for k, grp in g}).T
    worst.index = pd.MultiIndex.from_tuples(worst.index, names=keys)
    across = pd.DataFrame({k: _across_repetitions(grp) for k, grp in g}).T
    across.index = pd.MultiIndex.from_tuples(across.index, names=keys)
    out = out.join(worst).join(across).reset_index()
    spread = (out["status"] == "ok") & (out["spread_reason"] != "")
    out.loc[spread, "status"] = "unstable"
    out.loc[spread, "reason"] = out.loc[spread, "spread_reason"]
    for col in ("ci_low_ms", "ci_high_ms", "spread_within", "spread_between"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
    out["valid"] = out["status"].map(is_valid)
    out["trusted"] = out["status"].map(is_trusted)
    # A disturbed cell shows, marked, what its undisturbed repetitions measured, else what
    # its disturbed ones did: never the two pooled. Only the marked_* columns carry it.
    disturbed = out["status"] == "disturbed"
    for marked, clean, busy in zip(
        MARKED_TIMINGS, ("median_ms", "throughput_per_s"), DISTURBED_COLUMNS, strict=True
    ):
        out[marked] = out[clean].fillna(out[busy]).where(disturbed)
    out.loc[~out["valid"], list(CELL_TIMINGS)] = np.nan
    out.loc[~out["valid"], "ci_method"] = ""
    out["n_valid"] = out["n_valid"].astype(int)
    out = _int_sizes(out).sort_values(["model", "run_id", *_sort_axes(out)], kind="stable")
    return out[cell_columns(out)].reset_index(drop=True)


def with_ratios(cell_df: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Add time, CPU-memory and device-memory ratios to the baseline backend.

    Baseline group = same workload (every axis but the backend). The baseline is a valid
    cell ("ok" preferred over "unstable") from the same run when it has one, else from any
    run with that workload. base_status is that cell's status ("" where there is none): a
    ratio is trusted only over an "ok" baseline. Device memory ratios are NaN on CPU: there
    is no allocator peak to compare.
    """
    out = cell_df.copy()
    for col in RATIO_METRICS:
        out[col] = np.nan
    out["base_status"] = ""
    if out.empty:
        return out
    keys = list(WORKLOAD_AXES)
    measures = ["median_ms", "peak_rss_bytes", "allocator_peak_bytes", "status"]
    base = out[out["valid"] & (out["backend"] == baseline) & (out["options"] == "")]
    # One whole row per group, trusted first (first() would mix rows column by column).
    base = base.sort_values("trusted", ascending=False, kind="stable")
    same_run = (
        base.drop_duplicates(["run_id", *keys]).set_index(["run_id", *keys])[measures]
    ).add_suffix("_base")
    any_run = base.drop_duplicates(keys).set_index(keys)[measures].add_suffix("_base")
    merged = out.join(same_run, on=["run_id", *keys])
    fallback = out.join(any_run, on=keys)
    has_same = merged["status_base"].notna()
    for col in same_run.columns:
        merged[col] = merged[col].where(has_same, fallback[col])
    valid = out["valid"]
    out["time_ratio"] = (merged["median_ms"] / merged["median_ms_base"]).where(valid)
    out["cpu_mem_ratio"] = (merged["peak_rss_bytes"] / merged["peak_rss_bytes_base"]).where(valid)
    out["device_mem_ratio"] = (
        merged["allocator_peak_bytes"] / merged["allocator_peak_bytes_base"]
    ).where(valid)
    out["base_status"] = merged["status_base"].where(valid).fillna("").astype(str)
    return out


def has_quantized(df: pd.DataFrame) -> bool:
    """Whether some cell's precision is a quantized one (axes.QUANTIZED)."""
    return bool(len(df)) and bool(df["precision"].map(quant.is_quantized).any())


# A quantized cell's fp32 counterpart: the same rung (backend and options) on the same
# workload and placement, every axis but the precision.
FP32_KEYS = ("backend", "options", *(a for a in WORKLOAD_AXES if a != "precision"))


def machine_of(env: dict[str, Any] | None) -> str:
    """A machine's name: its host and its first GPU, else its CPU model (from a run's env)."""
    env = env or {}
    cpu = (env.get("cpu") or {}).get("model") or "unknown CPU"
    gpus = [g.get("name") for g in env.get("gpus") or [] if isinstance(g, dict)]
    host = env.get("hostname") or "unknown host"
    return " · ".join([host, *(gpus[:1] or [cpu])])


def with_fp32_speedup(
    cell_df: pd.DataFrame, machines: dict[str, str] | None = None
) -> pd.DataFrame:
    """Add speedup_vs_fp32 (the fp32 cell's median / this cell's: below 1 is slower) and
    fp32_status (that cell's status; the speedup is trusted only when it is ok) to the
    quantized cells. The fp32 cell is a valid one, ok preferred, from the same run when it
    has one, else from another run on the same machine (`machines`: run id -> machine_of;
    without it, the same run only): int8 speed is the machine's ISA's, so another machine's
    fp32 is never the divisor. '' and NaN where there is none or this cell is not valid."""
    out = cell_df.copy()
    out["speedup_vs_fp32"] = np.nan
    out["fp32_status"] = ""
    if out.empty:
        return out
    keys = list(FP32_KEYS)
    machine = out["run_id"].map(machines or {}).fillna(out["run_id"])
    mine = out.assign(_machine=machine)
    fp32 = mine[mine["valid"] & (mine["precision"] == "fp32")]
    fp32 = fp32.sort_values("trusted", ascending=False, kind="stable")
    measures = ["median_ms", "status"]
    merged = mine
    for scope in (["run_id", *keys], ["_machine", *keys]):  # the same run first
        found = fp32.drop_duplicates(scope).set_index(scope)[measures].add_suffix("_fp32")
        joined = mine.join(found, on=scope)
        if "status_fp32" not in merged:
            merged = joined
            continue
        has = merged["status_fp32"].notna()
        for col in found.columns:
            merged[col] = merged[col].where(has, joined[col])
    shown = out["valid"] & out["precision"].map(quant.is_quantized) & merged["status_fp32"].notna()
    out["speedup_vs_fp32"] = (merged["median_ms_fp32"] / out["median_ms"]).where(shown)
    out["fp32_status"] = merged["status_fp32"].where(shown).fillna("").astype(str)
    return out


def summary(runs: list[RunResult], baseline: str = BASELINE) -> pd.DataFrame:
    """Per-cell aggregates with baseline ratios: the table every view starts from. Runs with
    quantized cells get their speedup over fp32 too (with_fp32_speedup)."""
    out = with_ratios(cells(runs), baseline)
    if not has_quantized(out):
        return out
    return with_fp32_speedup(out, {r.run_id: machine_of(r.env) for r in runs})


def varying(df: pd.DataFrame, axes: tuple[str, ...] = CONDITION_AXES) -> list[str]:
    """The axes that take more than one value: the only ones worth naming in labels."""
    return [a for a in axes if a in df and df[a].nunique(dropna=False) > 1]


_AXIS_FORMAT = {
    "mode": "{}",
    "batch_size": "batch {}",
    **{a.name: a.label for a in GRID_AXES.values()},
    "init": "init {}",
    "other_sizes": "{}",  # a size sweep's other axes, already with their units
}


def axis_name(axis: str) -> str:
    """'batch size', 'resolution', 'seq len', 'samples': an axis in running text."""
    return "batch size" if axis == "batch_size" else axis.replace("_", " ")


def size_text(axis: str, value: Any) -> str:
    """One size in a label: 'res 64 px' (as image labels have always read),
    'seq len 128 tokens', '16000 samples'."""
    if axis == "resolution":
        return f"res {value} px"
    a = SIZE_AXES[axis]
    name = axis_name(axis)
    return a.show(value) if name == a.unit else f"{name} {a.show(value)}"


def sizes_text(row: Any, leave_out: str = "") -> str:
    """A row's sizes as size_text puts them ('' for a workload without size axes)."""
    parts = [
        size_text(a, row[a])
        for a in SIZE_COLUMNS
        if a != leave_out and a in row and not pd.isna(row[a])
    ]
    return " · ".join(parts)


def condition_label(row: Any, axes: list[str]) -> str:
    """'res 64 px · fp32 · 4 thr' for the axes that vary; '' when none does.

    `row` needs the size columns where "sizes" is among `axes` (a cell's row does)."""
    parts = (sizes_text(row) if a == "sizes" else _AXIS_FORMAT[a].format(row[a]) for a in axes)
    return " · ".join(p for p in parts if p)


def series_order(df: pd.DataFrame, baseline: str = BASELINE) -> list[str]:
    """Baseline first, then the others in order of first appearance."""
    seen = list(dict.fromkeys(df["series"]))
    return sorted(seen, key=lambda s: (not s.startswith(baseline), seen.index(s)))


@dataclass
class ThroughputTable:
    title: str  # model and the fixed axes
    table: pd.DataFrame  # rows: series; columns: batch sizes; median samples/s, NaN = none


def throughput_tables(cell_df: pd.DataFrame, baseline: str = BASELINE) -> list[ThroughputTable]:
    """Per workload (all axes but batch), backends × batch sizes of median throughput."""
    valid = cell_df[cell_df["valid"]]
    if valid.empty:
        return []
    fixed = [a for a in CONDITION_AXES if a != "batch_size"]
    label_axes = varying(cell_df, tuple(fixed))
    tables = []
    for _, grp in valid.groupby(["model", *fixed], sort=False):
        row = grp.iloc[0]
        table = grp.pivot_table(
            index="series", columns="batch_size", values="throughput_per_s", aggfunc="median"
        )
        order = [s for s in series_order(cell_df, baseline) if s in table.index]
        title = " · ".join(filter(None, [str(row["model"]), condition_label(row, label_axes)]))
        tables.append(ThroughputTable(title, table.loc[order].sort_index(axis=1)))
    return tables


def failures(cell_df: pd.DataFrame) -> pd.DataFrame:
    """Every cell without a measured timing, worst first (disturbed ones did measure)."""
    bad = cell_df[~cell_df["status"].isin(MEASURED_STATUSES)].copy()
    bad["_rank"] = bad["status"].map(severity)
    return bad.sort_values("_rank", ascending=False, kind="stable").drop(columns="_rank")


def untrusted(cell_df: pd.DataFrame) -> pd.DataFrame:
    """Cells with timings that are not trusted (unstable, disturbed), disturbed first."""
    rows = cell_df[cell_df["status"].isin(MEASURED_STATUSES - TRUSTED_STATUSES)].copy()
    rows["_rank"] = rows["status"].map(severity)
    return rows.sort_values("_rank", ascending=False, kind="stable").drop(columns="_rank")


def wants_batch_search(runs: list[RunResult]) -> list[str]:
    return [r.run_id for r in runs if r.spec.get("find_max_batch")]


def best_batches(cell_df: pd.DataFrame, run_ids: list[str]) -> pd.DataFrame:
    """Per (run, model, series, fixed axes): the batch with the highest median throughput.

    The doubling search stops at the first OOM or timeout; later batches are "skipped".
    `stopped_by` says why the search ended ("" when it ran out of batch sizes).
    """
    df = cell_df[cell_df["run_id"].isin(run_ids)]
    fixed = [a for a in CONDITION_AXES if a != "batch_size"]
    rows = []
    sizes = size_columns(df)
    for key, grp in df.groupby(["run_id", "model", "series", *fixed], sort=False):
        grp = grp.sort_values("batch_size")
        ok = grp[grp["valid"] & grp["throughput_per_s"].notna()]
        bad = grp[~grp["status"].isin(MEASURED_STATUSES)]  # what stopped the search
        first_bad = bad.iloc[0] if len(bad) else None
        best = ok.loc[ok["throughput_per_s"].idxmax()] if len(ok) else None
        rows.append(
            {
                **dict(zip(["run_id", "model", "series", *fixed], key, strict=True)),
                **{a: grp[a].iloc[0] for a in sizes},
                "best_batch": int(best["batch_size"]) if best is not None else None,
                "throughput_per_s": best["throughput_per_s"] if best is not None else math.nan,
                "median_ms": best["median_ms"] if best is not None else math.nan,
                "largest_valid_batch": int(ok["batch_size"].max()) if len(ok) else None,
                "stopped_by": (
                    f"{first_bad['status']} at batch {first_bad['batch_size']}"
                    + (f": {first_bad['reason']}" if first_bad["reason"] else "")
                    if first_bad is not None
                    else ""
                ),
            }
        )
    return pd.DataFrame(rows)


@dataclass
class Sweep:
    """One line plot's data: a model under fixed conditions, swept along one axis."""

    model: str
    condition: str  # the fixed axes that vary elsewhere ('res 64 px · fp32'), maybe ''
    label: str  # model and condition, for titles and selectors
    cells: pd.DataFrame  # valid cells only, sorted by the swept axis


def sweep_axes(cell_df: pd.DataFrame) -> list[str]:
    """What a plot can sweep: the batch size, then each size axis some cell has."""
    return ["batch_size", *size_columns(cell_df)]


def _swept(cell_df: pd.DataFrame, x: str) -> tuple[pd.DataFrame, list[str]]:
    """The valid cells that have `x`, and the axes held fixed along it.

    Along a size axis, cells of models without it are left out, and the cell's other size
    axes (if any) are held fixed in place of "sizes", which would hold `x` fixed too."""
    valid = cell_df[cell_df["valid"]]
    if x not in SIZE_COLUMNS:
        return valid, [a for a in CONDITION_AXES if a != x]
    if x not in valid:
        return valid.iloc[:0], []
    valid = valid[valid[x].notna()]
    valid = valid.assign(
        **{x: valid[x].astype(int)},
        other_sizes=[sizes_text(r, leave_out=x) for _, r in valid.iterrows()],
    )
    return valid, ["other_sizes" if a == "sizes" else a for a in CONDITION_AXES]


def sweeps(cell_df: pd.DataFrame, x: str) -> list[Sweep]:
    """Groups with at least two distinct values of `x` among valid cells (no 1-point lines).

    `x` is "batch_size" or a size axis ("resolution", "seq_len", "samples")."""
    valid, fixed = _swept(cell_df, x)
    if valid.empty:
        return []
    label_axes = varying(valid, tuple(fixed))
    out = []
    for _, grp in valid.groupby(["model", *fixed], sort=False):
        if grp[x].nunique() < 2:
            continue
        row = grp.iloc[0]
        condition = condition_label(row, label_axes)
        label = " · ".join(filter(None, [str(row["model"]), condition]))
        out.append(Sweep(str(row["model"]), condition, label, grp.sort_values(x)))
    return out


def sweep_note(cell_df: pd.DataFrame, x: str) -> str:
    """Why there is no plot along `x` ('' when there is one)."""
    name = axis_name(x)
    valid = cell_df[cell_df["valid"]]
    if valid.empty:
        return "No valid timings in these runs: nothing to plot."
    valid, _ = _swept(cell_df, x)
    if valid.empty:
        return f"No valid timings at any {name}: no plot against {name}."
    values = sorted(valid[x].unique())
    if len(values) < 2:
        return f"Only one {name} ({values[0]}) was measured: no plot against {name}."
    if not sweeps(cell_df, x):
        return f"No workload has valid results at two or more {name}s: no plot against {name}."
    return ""


RATIO_METRICS = {
    "time_ratio": "time",
    "cpu_mem_ratio": "CPU memory (peak RSS)",
    "device_mem_ratio": "device memory (allocator peak)",
}


def _geomean(x: pd.Series) -> float:
    x = x[(x > 0) & np.isfinite(x)]
    return float(np.exp(np.log(x).mean())) if len(x) else math.nan


def over_untrusted_base(ratio_df: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Non-baseline cells whose ratios divide by an unstable baseline: left out of summaries."""
    has_base = ratio_df["base_status"] != ""
    return ratio_df[
        ratio_df["valid"]
        & (ratio_df["backend"] != baseline)
        & has_base
        & ~ratio_df["base_status"].isin(TRUSTED_STATUSES)
    ]


def untrusted_base_note(ratio_df: pd.DataFrame, baseline: str = BASELINE) -> str:
    """Why some workloads are missing from the ratio summaries ('' when none is)."""
    n = len(over_untrusted_base(ratio_df, baseline))
    if not n:
        return ""
    return (
        f"{n} cell{'s' if n > 1 else ''} left out of the ratios: {baseline} was unstable on "
        "their workload, so a ratio to it is indicative only (shown marked ? in the tables)."
    )


def ratio_summary(ratio_df: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per (model, non-baseline series, metric): geometric mean of the ratios over the
    workloads both ran, with their min and max and how many workloads there were. Only
    ratios over a trusted ("ok") baseline count."""
    trusted_base = ratio_df["base_status"].isin(TRUSTED_STATUSES)
    df = ratio_df[ratio_df["valid"] & (ratio_df["backend"] != baseline) & trusted_base]
    rows = []
    for (model, series), grp in df.groupby(["model", "series"], sort=False):
        for metric in RATIO_METRICS:
            values = grp[metric].dropna()
            rows.append(
                {
                    "model": model,
                    "series": series,
                    "metric": metric,
                    "geomean": _geomean(values),
                    "low": values.min() if len(values) else math.nan,
                    "high": values.max() if len(values) else math.nan,
                    "n": int(len(values)),
                }
            )
    return pd.DataFrame(rows, columns=["model", "series", "metric", "geomean", "low", "high", "n"])


def startup_summary(cell_df: pd.DataFrame) -> pd.DataFrame:
    """Per (model, series): median, min and max over valid cells of cold start and startup."""
    valid = cell_df[cell_df["valid"]]
    out = (
        valid.groupby(["model", "series"], sort=False)[["cold_start_ms", "startup_ms"]]
        .agg(["median", "min", "max"])
        .reset_index()
    )
    out.columns = ["_".join(c).rstrip("_") for c in out.columns]  # cold_start_ms_median, ...
    return out
