"""The inference-framework study's tables, as data: per batch size, frameworks × machines
(the page draws them, html/study.py; the markdown export writes them, exports/study.py).

The study (seeds/004) compared frameworks on several GPUs with one table per batch size:
frameworks as rows, machines as columns, a colour gradient within the table, the best of
each machine column in bold, and an asterisk where a machine beat the reference machine
(the V100 there). Here the columns are the machines the runs came from (a merged store,
`stackcost merge`); on one machine they are its thread counts, or its devices, whichever
the runs vary; the reference is a column chosen by the user (default: the first).

Throughput tables are always drawn; power tables where cells carry an energy figure
(--profile), one per method: a measured watt and an estimated one never share a table.
Only valid cells (ok, unstable) give a number; a cell that ran but was wrong, or failed,
shows its status in place of a number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from stackcost.axes import QUANTIZED
from stackcost.report.frames import quant, tidy
from stackcost.report.frames.tidy import machine_of
from stackcost.report.units import num
from stackcost.store.runs import RunResult


@dataclass
class StudyTable:
    title: str  # workload · batch · metric, with the unit
    table: pd.DataFrame  # rows: frameworks (backend [options]); columns: machines; NaN = none
    statuses: dict[tuple[str, str], str]  # (framework, column) -> status where no number
    higher_is_better: bool
    reference: str | None  # the column the asterisks compare with
    column_axis: str  # "machine", "threads" or "device"
    beats: set[tuple[str, str]] = field(default_factory=set)  # (framework, column) marked *

    def best(self, column: str) -> str | None:
        col = self.table[column].dropna()
        if col.empty:
            return None
        return str(col.idxmax() if self.higher_is_better else col.idxmin())


def _frame(runs: list[RunResult]) -> pd.DataFrame:
    """tidy.cells of the runs, with the machine, and the power per cell and its method."""
    df = tidy.cells(runs)
    if df.empty:
        return df
    machines = {r.run_id: machine_of(r.env) for r in runs}
    df["machine"] = df["run_id"].map(machines)
    # A row is a framework across machines: the series name without its run.
    df["framework"] = df["backend"] + df["options"].map(lambda o: f" [{o}]" if o else "")
    power: dict[tuple[str, str], tuple[float, str]] = {}
    for r in runs:
        for c in r.cells():
            energies = [rep.energy for rep in c.repetitions if rep.energy is not None]
            if energies and c.valid:
                watts = sorted(e.watts for e in energies)
                power[(r.run_id, c.cell.key())] = (watts[len(watts) // 2], energies[0].method)
    keys = list(zip(df["run_id"], df["cell_key"], strict=True))
    df["watts"] = [power.get(k, (float("nan"), ""))[0] for k in keys]
    df["energy_method"] = [power.get(k, (float("nan"), ""))[1] for k in keys]
    return df


def _column_axis(df: pd.DataFrame) -> str:
    if df["machine"].nunique() > 1:
        return "machine"
    if df["threads"].nunique() > 1:
        return "threads"
    if df["device"].nunique() > 1:
        return "device"
    return "machine"


def _column_label(row: pd.Series, axis: str) -> str:
    return f"{row['threads']} thr" if axis == "threads" else str(row[axis])


def study_tables(runs: list[RunResult], reference: str | None = None) -> list[StudyTable]:
    """Per workload and batch size: throughput (and power) of each framework per machine.

    Drawn only when there is something to compare: several machines (or thread counts,
    or devices) for one workload. `reference` names a column (a substring of it is
    enough); None takes the first.
    """
    df = _frame(runs)
    if df.empty:
        return []
    df = df[df["mode"] == "infer"]
    axis = _column_axis(df)
    if df[axis].nunique() < 2:
        return []
    if axis == "threads":
        df = df.sort_values("threads", kind="stable")
    df = df.assign(column=[_column_label(r, axis) for _, r in df.iterrows()])
    columns = list(dict.fromkeys(df["column"]))
    ref = _pick(columns, reference)
    # Rows in the order the runs list their backends (the study's, in a study's spec).
    listed = [b for r in runs for b in r.spec.get("backends", []) if isinstance(b, str)]
    rank = {b: i for i, b in enumerate(dict.fromkeys(listed))}
    seen = list(dict.fromkeys(df["framework"]))
    order = sorted(seen, key=lambda f: (rank.get(f.split(" [")[0], len(rank)), seen.index(f)))
    sizes = tidy.size_columns(df)
    tables: list[StudyTable] = []
    for key, grp in df.groupby(
        ["model", "precision", *sizes, "batch_size"], sort=False, dropna=False
    ):
        model, precision, *size_values, batch = key
        shown = [
            tidy.size_text(a, v) for a, v in zip(sizes, size_values, strict=True) if not pd.isna(v)
        ]
        workload = " · ".join([str(model), *shown, str(precision)])
        metrics = [("throughput_per_s", "throughput (samples/s)", True, grp)]
        for method in sorted(m for m in grp["energy_method"].unique() if m):
            part = grp[grp["energy_method"] == method]
            metrics.append(("watts", f"power (W, {method})", False, part))
        for value, label, higher, part in metrics:
            table = part.pivot_table(
                index="framework", columns="column", values=value, aggfunc="median"
            )
            table = table.reindex(
                index=[f for f in order if f in set(grp["framework"])],
                columns=[c for c in columns if c in set(grp["column"])],
            )
            statuses = {
                (r["framework"], r["column"]): r["status"]
                for _, r in grp.iterrows()
                if not r["valid"]
            }
            t = StudyTable(
                title=f"{workload} · batch {batch}: {label}",
                table=table,
                statuses=statuses,
                higher_is_better=higher,
                reference=ref if ref in table.columns else None,
                column_axis=axis,
            )
            t.beats = _beats(t)
            tables.append(t)
    return tables


def _pick(columns: list[str], reference: str | None) -> str:
    if reference is None:
        return columns[0]
    hits = [c for c in columns if reference in c]
    return hits[0] if hits else columns[0]


def _beats(t: StudyTable) -> set[tuple[str, str]]:
    """(series, column) where the column did better than the reference on that series."""
    out: set[tuple[str, str]] = set()
    if t.reference is None:
        return out
    for series in t.table.index:
        ref = t.table.at[series, t.reference]
        if pd.isna(ref):
            continue
        for col in t.table.columns:
            v = t.table.at[series, col]
            if col == t.reference or pd.isna(v):
                continue
            if (v > ref) if t.higher_is_better else (v < ref):
                out.add((series, col))
    return out


def time_ratios(tables: list[StudyTable]) -> pd.DataFrame:
    """TorchBench's T_A/T_B between machines: per workload, batch and framework, the time
    per sample on each column over the reference column's (below 1: faster than it).
    From the throughput tables, whose samples/s are the inverse of time per sample."""
    rows = []
    for t in tables:
        if t.reference is None or not t.higher_is_better:
            continue
        for framework in t.table.index:
            ref = t.table.at[framework, t.reference]
            for col in t.table.columns:
                v = t.table.at[framework, col]
                if col == t.reference or pd.isna(v) or pd.isna(ref) or v <= 0:
                    continue
                rows.append(
                    {
                        "workload": t.title.split(": ")[0],
                        "framework": framework,
                        "column": col,
                        "reference": t.reference,
                        "ratio": float(ref) / float(v),
                    }
                )
    return pd.DataFrame(rows, columns=["workload", "framework", "column", "reference", "ratio"])


def cell_text(t: StudyTable, series: str, column: str) -> str:
    """A number with its asterisk, or the status where the cell has no number."""
    v = t.table.at[series, column]
    if pd.isna(v):
        return t.statuses.get((series, column), "—")
    return num(float(v)) + ("*" if (series, column) in t.beats else "")


def note(t: StudyTable) -> str:
    better = "higher" if t.higher_is_better else "lower"
    ref = f"; * = {better} than {t.reference} on that row" if t.reference else ""
    return f"columns: {t.column_axis}; bold = best of the column ({better} is better){ref}"


# -- quantized precisions: the study's table gains a column pair per precision ------------


@dataclass
class QuantTable:
    """Per workload, batch and machine: each framework's fp32 throughput, then per quantized
    precision its speedup over that framework's own fp32 and its top-1 agreement."""

    title: str
    header: list[str]
    rows: list[tuple[str, list[str]]]  # (framework, cells)
    slower: set[tuple[str, int]] = field(default_factory=set)  # (framework, column index)


QUANT_NOTE = (
    "per framework: × its own fp32 (median latency ratio on the same batch, sizes and "
    "threads; below 1× slower, marked) and top-1 agreement with eager fp32 (% of rows, "
    "worst repetition); a status where the quantized cell has no valid timing"
)


def quant_tables(runs: list[RunResult]) -> list[QuantTable]:
    """One table per workload, batch and machine (threads, device) with quantized cells."""
    df = _frame(runs)
    if df.empty or not tidy.has_quantized(df):
        return []
    machines = {r.run_id: machine_of(r.env) for r in runs}
    df = tidy.with_fp32_speedup(df[df["mode"] == "infer"], machines)
    listed = [b for r in runs for b in r.spec.get("backends", []) if isinstance(b, str)]
    rank = {b: i for i, b in enumerate(dict.fromkeys(listed))}
    sizes = tidy.size_columns(df)
    vary = [a for a in ("threads", "device") if df[a].nunique() > 1]
    tables = []
    for key, grp in df.groupby(
        ["model", *sizes, "batch_size", "machine", "threads", "device"], sort=False, dropna=False
    ):
        model, *size_values, batch, machine, threads, device = key
        precisions = [p for p in QUANTIZED if p in set(grp["precision"])]
        if not precisions:
            continue
        shown = [
            tidy.size_text(a, v) for a, v in zip(sizes, size_values, strict=True) if not pd.isna(v)
        ]
        place = {"threads": f"{threads} thr", "device": str(device)}
        title = " · ".join(
            [str(model), *shown, f"batch {batch}", str(machine), *(place[a] for a in vary)]
        )
        header = ["fp32 throughput (samples/s)"]
        for p in precisions:
            header += [f"{p} vs fp32", f"{p} top-1 agreement (%)"]
        seen = list(dict.fromkeys(grp["framework"]))
        order = sorted(seen, key=lambda f: (rank.get(f.split(" [")[0], len(rank)), seen.index(f)))
        t = QuantTable(title, header, [])
        for framework in order:
            mine = grp[grp["framework"] == framework]
            fp32 = mine[(mine["precision"] == "fp32") & mine["valid"]]
            cells = [_fp32_text(mine, fp32)]
            for p in precisions:
                speed, top1, slower = _quant_pair(mine[mine["precision"] == p])
                if slower:
                    t.slower.add((framework, len(cells)))
                cells += [speed, top1]
            t.rows.append((framework, cells))
        tables.append(t)
    return tables


def _fp32_text(mine: pd.DataFrame, fp32: pd.DataFrame) -> str:
    if len(fp32):
        return num(float(fp32["throughput_per_s"].median()))
    rows = mine[mine["precision"] == "fp32"]
    return str(rows["status"].iloc[0]) if len(rows) else "—"


def _quant_pair(rows: pd.DataFrame) -> tuple[str, str, bool]:
    """The speedup text (or the cell's status), the top-1 agreement, and whether slower."""
    if rows.empty:
        return "—", "—", False
    r = rows.iloc[0]
    top1 = r["top1"] if "top1" in r else float("nan")
    agree = "—" if pd.isna(top1) else f"{float(top1) * 100:.1f}"
    if not r["valid"]:
        return str(r["status"]), agree, False
    value = r["speedup_vs_fp32"]
    return quant.speedup_text(value, r["fp32_status"]), agree, quant.is_slower(value)
