"""The quantization trade-off per model: speedup over fp32 against quality lost, one point
per rung × precision, with the Pareto front (the points nothing beats on both).

A point's speedup is over its own rung's fp32 cell on the same batch, sizes and threads
(tidy.with_fp32_speedup): each panel holds one such workload, so no speedup is averaged
over batches and a slower point stays where it is, left of 1×. Its accuracy cost is the
quality its weights lost on held-out data where `stackcost heldout` stored it for every
point of the panel (store/heldout.py: an image model's accuracy drop in points, a decoder's
perplexity increase in percent), else the share of rows whose top-1 disagrees with eager
fp32.

Only valid cells are points: a quantized cell that failed its acceptance rule ("wrong")
has no valid timing; the note counts it, and the tables show its agreement.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from stackcost.report.frames import quant, tidy
from stackcost.store.heldout import METRICS

CONDITION = tuple(a for a in tidy.CONDITION_AXES if a != "precision")
Y_LABEL = {"agreement": "top-1 disagreement with fp32 (% of rows)", **METRICS}
UNIT = {"agreement": "% of rows", "accuracy_drop_pt": "pt", "ppl_increase_pct": "% ppl"}
X_LABEL = "speedup over the same rung's fp32 (×, median latency ratio)"
REFERENCE = "fp32 (every rung's own)"
SLOWER_SIDE = "slower than fp32"


@dataclass
class Panel:
    model: str
    condition: str  # the held axes that vary among panels ('batch 8 · 2 thr'), maybe ''
    label: str  # model and condition
    metric: str  # what y is: "agreement", or a held-out metric (store.heldout.METRICS)
    # One row per point: series, precision, speedup, drop, on_front, slower, trusted
    # (the fp32 cell it divides by is ok), top1, rows.
    points: pd.DataFrame


def _quantized(summ: pd.DataFrame) -> pd.DataFrame:
    if "speedup_vs_fp32" not in summ:
        return summ.iloc[:0]
    return summ[summ["precision"].map(quant.is_quantized)]


def panels(summ: pd.DataFrame) -> list[Panel]:
    """One panel per model and held workload with at least one point."""
    q = _quantized(summ)
    if q.empty:
        return []
    q = q[q["valid"] & q["speedup_vs_fp32"].notna()]
    if q.empty:
        return []
    label_axes = tidy.varying(q, CONDITION)
    out = []
    for _, grp in q.groupby(["model", *CONDITION], sort=False, dropna=False):
        metric = next((m for m in METRICS if m in grp and grp[m].notna().all()), "agreement")
        if metric != "agreement":
            drop = grp[metric]
        elif "top1" in grp:
            drop = (1.0 - grp["top1"]) * 100
        else:
            continue
        grp = grp.assign(drop=drop)[drop.notna()]
        if grp.empty:
            continue
        pts = pd.DataFrame(
            {
                "series": grp["series"].astype(str),
                "precision": grp["precision"].astype(str),
                "speedup": grp["speedup_vs_fp32"].astype(float),
                "drop": grp["drop"].astype(float),
                "slower": grp["speedup_vs_fp32"].map(quant.is_slower),
                "trusted": grp["fp32_status"] == "ok",
                "top1": grp["top1"] if "top1" in grp else float("nan"),
                "rows": grp["agreement_rows"] if "agreement_rows" in grp else float("nan"),
            }
        ).reset_index(drop=True)
        # The fp32 reference (1×, no loss) is a choice every rung has: it anchors the front.
        coords = [(1.0, 0.0), *zip(pts["speedup"], pts["drop"], strict=True)]
        on_front = {i - 1 for i in quant.front(coords) if i > 0}
        pts["on_front"] = [i in on_front for i in range(len(pts))]
        row = grp.iloc[0]
        condition = tidy.condition_label(row, label_axes)
        label = " · ".join(filter(None, [str(row["model"]), condition]))
        out.append(Panel(str(row["model"]), condition, label, metric, pts))
    return out


def front_line(p: Panel) -> tuple[list[float], list[float]]:
    """The front from the fp32 reference through its points, by speedup ascending."""
    f = p.points[p.points["on_front"]].sort_values("speedup")
    xs, ys = [1.0, *f["speedup"]], [0.0, *f["drop"]]
    keep = sorted(range(len(xs)), key=lambda i: xs[i])
    return [xs[i] for i in keep], [ys[i] for i in keep]


def note(summ: pd.DataFrame) -> str:
    """What the figure leaves out and why; '' when it draws every quantized cell."""
    q = _quantized(summ)
    if q.empty:
        return ""
    parts = []
    invalid = q[~q["valid"]]
    if len(invalid):
        counts = invalid["status"].value_counts()
        statuses = ", ".join(f"{n} {s}" for s, n in counts.items())
        parts.append(
            f"Not drawn (no valid timing): {statuses} quantized cell(s); a wrong one failed "
            "its acceptance rule, and the tables show its agreement."
        )
    alone = q[q["valid"] & q["speedup_vs_fp32"].isna()]
    if len(alone):
        parts.append(
            f"Not drawn: {len(alone)} quantized cell(s) without a valid fp32 cell of the same "
            "rung and workload to divide by."
        )
    untrusted = q[q["valid"] & q["speedup_vs_fp32"].notna() & (q["fp32_status"] != "ok")]
    if len(untrusted):
        parts.append(
            f"{len(untrusted)} point(s) divide by an fp32 cell that is not ok: drawn hollow, "
            "indicative only."
        )
    return " ".join(parts)
