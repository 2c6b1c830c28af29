"""The best backend per workload on each cost (latency, throughput, energy, memory): tables."""

from __future__ import annotations

from typing import Any

import pandas as pd

from stackcost.report.frames.costs import Row
from stackcost.report.units import num


def _best_rows(df: pd.DataFrame, value: str, keys: list[str]) -> dict[str, Any]:
    batches = sorted(int(b) for b in df["batch_size"].unique())
    rows = []
    for key, grp in df.groupby(keys, sort=False):
        cells = []
        for b in batches:
            at = grp[(grp["batch_size"] == b) & grp[value].notna()]
            if at.empty:
                cells.append({"text": "—", "value": ""})
                continue
            best = at.loc[at[value].idxmax()]
            runner = at[at.index != best.name][value].max()
            margin = (
                f" (+{best[value] / runner - 1:.0%} over next)"
                if pd.notna(runner) and runner > 0
                else ""
            )
            cells.append({"text": str(best["series"]), "value": num(float(best[value])) + margin})
        rows.append(
            {
                "label": " · ".join(str(k) for k in (key if isinstance(key, tuple) else (key,))),
                "cells": cells,
            }
        )
    return {"columns": batches, "rows": rows}


def best_tables(rows: list[Row]) -> list[dict[str, Any]]:
    """Best backend per batch size, for throughput and (per energy method) samples/J."""
    recs = []
    for r in rows:
        c = r.cell
        workload = " · ".join(
            [
                c.model.name,
                *([c.size_label()] if c.sizes else []),
                f"{c.threads} thr",
                c.precision,
                c.device,
            ]
        )
        e = r.rep.energy
        recs.append(
            {
                "workload": workload,
                "batch_size": c.batch_size,
                "series": r.series,
                "throughput": r.throughput,
                "samples_per_joule": e.samples_per_joule if e else None,
                "method": e.method if e else None,
            }
        )
    df = pd.DataFrame(recs)
    out = []
    if df.empty:
        return out
    df["throughput"] = pd.to_numeric(df["throughput"], errors="coerce")
    df["samples_per_joule"] = pd.to_numeric(df["samples_per_joule"], errors="coerce")
    if df["throughput"].notna().any():
        out.append(
            {
                "title": "best backend per batch size: throughput (samples/s, median)",
                **_best_rows(df, "throughput", ["workload"]),
            }
        )
    energy = df[df["samples_per_joule"].notna()]
    if not energy.empty:
        energy = energy.assign(workload=energy["workload"] + " · " + energy["method"])
        out.append(
            {
                "title": "best backend per batch size: energy efficiency (samples/J; the "
                "method, measured or estimated, is part of each row: rows are never mixed)",
                **_best_rows(energy, "samples_per_joule", ["workload"]),
            }
        )
    return out
