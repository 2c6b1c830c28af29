"""Does MLPerf LoadGen's SingleStream p90 agree with stackcost's own timed loop?

The same cells (resnet18, batch 1, 64 px, 2 threads, eager and onnxruntime by default) run
through `stackcost run --scenario timed-loop,single-stream`: each repetition in its own
worker process, as any run. The timed loop keeps every sample, whose p90 is computed here
with numpy; LoadGen's p90 is the one its summary reports. Repetitions alternate between
the two, cell by cell, so both see the same machine. PASS when every backend's median
relative difference is within 5% (measure on a quiet machine).

LoadGen's p90 includes its own per-query cost (the issue callback and QuerySamplesComplete,
~60 us measured on 2 cores), so a step much under 1 ms reads slower under LoadGen.

    python benchmarks/loadgen_agreement.py [--backends eager,onnxruntime] [--model resnet18] \
        [--resolution 64] [--batch-size 1] [--threads 2] [--repeats 3] [--seconds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.cli import main as stackcost
from stackcost.store.database import Store
from stackcost.store.runs import RunResult

TOLERANCE = 0.05


def measure(args: argparse.Namespace, db: Path) -> RunResult:
    argv = [
        "run", args.model, "--backends", args.backends, "--batch-size", str(args.batch_size),
        "--resolution", str(args.resolution), "--threads", str(args.threads),
        "--repeats", str(args.repeats), "--scenario", "timed-loop,single-stream",
        "--min-time", str(args.seconds), "--max-time", str(args.seconds * 4),
        "--loadgen-min-duration", f"{args.seconds}s", "--on-disturbed", "keep",
        "--db", str(db), "--quiet",
    ]  # fmt: skip
    code = stackcost(argv)
    if code not in (0, 1):
        sys.exit(code)
    with Store(db, read_only=True) as store:
        return RunResult.from_store(store, store.run_ids()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="eager,onnxruntime")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0, help="timed loop and LoadGen, each")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(prefix="loadgen-agreement-") as tmp:
        run = measure(args, Path(tmp) / "agreement.db")
    # backend -> repetition -> {"timed": p90 ms, "loadgen": p90 ms}
    pairs: dict[str, dict[int, dict[str, float]]] = {}
    statuses: dict[str, set[str]] = {}
    for cell, rep in run.records:
        statuses.setdefault(cell.backend, set()).add(rep.status)
        side = pairs.setdefault(cell.backend, {}).setdefault(rep.repetition, {})
        if cell.scenario is None and rep.samples_ns:
            side["timed"] = float(np.percentile(np.array(rep.samples_ns) / 1e6, 90))
        elif cell.scenario is not None and rep.scenario and rep.scenario.latency_ms:
            side["loadgen"] = rep.scenario.latency_ms
    table = Table(title=f"SingleStream p90 vs timed-loop p90: {args.model} b{args.batch_size} "
                  f"{args.resolution}px t{args.threads}")  # fmt: skip
    for name in ("backend", "repetition", "timed loop p90 (ms)", "LoadGen p90 (ms)", "diff"):
        table.add_column(name, justify="left" if name == "backend" else "right")
    figures: dict[str, dict[str, object]] = {}
    ok = True
    for backend, reps in pairs.items():
        diffs = []
        for i, side in sorted(reps.items()):
            if "timed" in side and "loadgen" in side:
                diff = side["loadgen"] / side["timed"] - 1
                diffs.append(diff)
                table.add_row(backend, str(i), f"{side['timed']:.3f}", f"{side['loadgen']:.3f}",
                              f"{diff:+.1%}")  # fmt: skip
        median = statistics.median(diffs) if diffs else None
        ok = ok and median is not None and abs(median) <= TOLERANCE
        figures[backend] = {
            "pairs": reps,
            "median_relative_difference": median,
            "statuses": sorted(statuses[backend]),
        }
        shown = f"{median:+.1%}" if median is not None else "—"
        table.add_row(backend, "median", "", "", shown, style="bold")
    console.print(table)
    verdict = "PASS" if ok else "FAIL"
    console.print(
        f"{verdict}: LoadGen's SingleStream p90 within {TOLERANCE:.0%} of the timed loop's "
        f"p90 (median over repetitions) for every backend; statuses: "
        + ", ".join(f"{b} {'/'.join(sorted(s))}" for b, s in statuses.items())
    )
    if args.json:
        write_figures(args.json, "loadgen_agreement", {"tolerance": TOLERANCE, **figures}, console)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
