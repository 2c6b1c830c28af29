"""Is int8 faster here? Quantized/fp32 throughput per rung, measured side by side.

Each model runs once through `stackcost.run`: every rung at fp32 and at its quantized
precisions in one run, whose repetitions (one process each) interleave cell by cell, so
fp32 and int8 share the machine's drift. The ratio is fp32's median latency over the
quantized cell's (the median of each cell's repetition medians): above 1 the quantized
cell is faster, below 1 slower, and a slower cell is printed as such. A cell that is not
`ok` (wrong, unsupported, disturbed, unstable) enters no ratio and shows its status. The
machine's int8 ISA features (AVX2, AVX-512 VNNI, AVX-VNNI, AMX-INT8, AVX-512 BF16) head the
table: they decide whether int8 kernels exist to be fast with.

    python benchmarks/quantized.py [--models resnet50,bert-base] [--repeats 3]
        [--threads 2] [--db PATH] [--json PATH] [--reuse]

resnet50 runs at batch 16, 224 px with int8-dyn and int8; bert-base at batch 1, 128 tokens
with int8-dyn, w8 and w4. Several minutes per model on 2 cores (compiles and exports).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import stackcost
from stackcost.env import INT8_ISA, cpu_info
from stackcost.errors import SpecError

RUNGS = ("eager", "inductor", "onnxruntime", "openvino")
WORKLOADS: dict[str, dict[str, Any]] = {
    "resnet50": {
        "batch_sizes": [16],
        "resolutions": [224],
        "precisions": ["fp32", "int8-dyn", "int8"],
    },
    "bert-base": {
        "batch_sizes": [1],
        "sizes": {"seq_len": [128]},
        "precisions": ["fp32", "int8-dyn", "w8", "w4"],
    },
}


def measure(model: str, repeats: int, threads: int, db: Path) -> list[dict[str, Any]]:
    """One run of `model`: each rung x precision, and its ratio to the same rung's fp32."""
    run = stackcost.run(
        model, list(RUNGS), repeats=repeats, threads=[threads], db=db, **WORKLOADS[model]
    )
    return ratios(model, run)


def ratios(model: str, run: Any) -> list[dict[str, Any]]:
    """Each cell's median of repetition medians and its ratio to the same rung's fp32.

    A ratio needs valid repetitions on both sides (not wrong, failed or disturbed); one
    whose cells are not both `ok` (unstable: the stop rule was not met) is marked
    indicative, as the suite's summary marks it."""
    cells = {(c.cell.backend, c.cell.precision): c for c in run.cells()}
    rows = []
    for (rung, precision), cell in cells.items():
        ms = statistics.median(cell.repetition_medians) if cell.repetition_medians else None
        base = cells.get((rung, "fp32"))
        base_ms = (
            statistics.median(base.repetition_medians)
            if base is not None and base.repetition_medians
            else None
        )
        ratio = base_ms / ms if base_ms and ms and precision != "fp32" else None
        sure = base is not None and cell.status == "ok" and base.status == "ok"
        rows.append(
            {
                "model": model,
                "rung": rung,
                "precision": precision,
                "median_ms": ms,
                "ratio_vs_fp32": ratio,
                "indicative": ratio is not None and not sure,
                "repetitions": len(cell.repetition_medians),
                "status": cell.status,
                "reason": cell.reason,
            }
        )
    return rows


def newest_run(db: Path, model: str) -> Any:
    """The newest run of `model` in `db` (LookupError when there is none)."""
    from stackcost.store.database import Store
    from stackcost.store.runs import RunResult

    with Store(db) as store:
        for run_id in reversed(store.run_ids()):
            run = RunResult.from_store(store, run_id)
            if run.records and run.records[0][0].model.name == model:
                return run
    raise LookupError(f"no run of {model} in {db}")


def isa_line() -> str:
    flags = set(cpu_info()["flags"])
    return " · ".join(f"{label} {'yes' if f in flags else 'no'}" for f, label in INT8_ISA.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet50,bert-base")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--db", type=Path, default=None, help="keep the runs in this store")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--reuse", action="store_true", help="render the newest runs in --db, measure nothing"
    )
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = [m for m in models if m not in WORKLOADS]
    if unknown:
        print(f"--models: {unknown[0]!r} is not one of {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    console = Console()
    db = args.db or Path(tempfile.mkdtemp(prefix="stackcost-quant-")) / "quantized.db"
    try:
        if args.reuse:  # the newest stored run of each model, rendered again
            rows = [r for m in models for r in ratios(m, newest_run(db, m))]
        else:
            rows = [r for m in models for r in measure(m, args.repeats, args.threads, db)]
    except (SpecError, LookupError) as error:
        print(error, file=sys.stderr)
        return 2
    table = Table(title=f"quantized / fp32 throughput per rung — ISA: {isa_line()}")
    for column in ("model", "rung", "precision", "median ms", "reps", "vs fp32", "status"):
        table.add_column(column)
    for r in rows:
        ratio = r["ratio_vs_fp32"]
        shown = "—" if ratio is None else f"{ratio:.2f}× {'faster' if ratio >= 1 else 'SLOWER'}"
        if r["indicative"]:
            shown += " ?"
        ms = "—" if r["median_ms"] is None else f"{r['median_ms']:.1f}"
        reps = str(r["repetitions"])
        table.add_row(r["model"], r["rung"], r["precision"], ms, reps, shown, r["status"])
    console.print(table)
    console.print("? indicative: one side is not ok (unstable: its stop rule was not met)")
    console.print(f"runs stored in {db}")
    if args.json:
        args.json.write_text(json.dumps({"isa": isa_line(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
