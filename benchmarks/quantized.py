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
        [--threads 2] [--db PATH] [--json PATH]

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
    medians: dict[tuple[str, str], float | None] = {}
    statuses: dict[tuple[str, str], str] = {}
    for cell in run.cells():
        key = (cell.cell.backend, cell.cell.precision)
        statuses[key] = cell.status if not cell.reason else f"{cell.status}: {cell.reason}"
        ms = cell.repetition_medians if cell.status == "ok" else []
        medians[key] = statistics.median(ms) if ms else None
    rows = []
    for (rung, precision), ms in medians.items():
        base = medians.get((rung, "fp32"))
        ratio = base / ms if base and ms and precision != "fp32" else None
        rows.append(
            {
                "model": model,
                "rung": rung,
                "precision": precision,
                "median_ms": ms,
                "ratio_vs_fp32": ratio,
                "status": statuses[(rung, precision)],
            }
        )
    return rows


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
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = [m for m in models if m not in WORKLOADS]
    if unknown:
        print(f"--models: {unknown[0]!r} is not one of {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    console = Console()
    db = args.db or Path(tempfile.mkdtemp(prefix="stackcost-quant-")) / "quantized.db"
    try:
        rows = [r for m in models for r in measure(m, args.repeats, args.threads, db)]
    except SpecError as error:
        print(error, file=sys.stderr)
        return 2
    table = Table(title=f"quantized / fp32 throughput per rung — ISA: {isa_line()}")
    for column in ("model", "rung", "precision", "median ms", "vs fp32", "status"):
        table.add_column(column)
    for r in rows:
        ratio = r["ratio_vs_fp32"]
        shown = "—" if ratio is None else f"{ratio:.2f}× {'faster' if ratio >= 1 else 'SLOWER'}"
        ms = "—" if r["median_ms"] is None else f"{r['median_ms']:.2f}"
        table.add_row(r["model"], r["rung"], r["precision"], ms, shown, r["status"][:60])
    console.print(table)
    console.print(f"runs stored in {db}")
    if args.json:
        args.json.write_text(json.dumps({"isa": isa_line(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
