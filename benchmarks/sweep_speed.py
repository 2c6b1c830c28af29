"""A sweep's wall time, the old way against the new, with the same verdicts.

Runs one spec twice with the real CLI (`stackcost sweep`), into two fresh stores:
- **old**: `--no-reuse`: every repetition starts a fresh interpreter (imports torch)
  and exports or compiles its own artifacts, as stackcost did before;
- **new**: the default: workers fork from a warm starter that imported torch once, and
  a cell's later repetitions reuse its first one's ONNX export or Inductor compile.

Then it compares them cell by cell with `stackcost compare`'s own statistics: each
cell's status on both sides, and the latency verdict (unchanged / noisy / improved /
regressed at the compare default threshold). What the timed loop measures is the same
on both paths, so every cell should keep its status and its median within noise;
statuses that flip between ok and unstable on this noisy machine are listed, not hidden.

    python benchmarks/sweep_speed.py [--spec examples/scaling.yaml] [--order old,new]
        [--models resnet18] [--json PATH]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.compare.diff import compare_sides, load_side

ROOT = Path(__file__).resolve().parents[1]
PATHS = {"old": ["--no-reuse"], "new": []}


def sweep(spec: str, db: Path, flags: list[str], extra: list[str], console: Console) -> float:
    """Wall time of one `stackcost sweep`, in seconds, from launch to exit."""
    command = [sys.executable, "-m", "stackcost.cli", "sweep", spec, "--db", str(db), "--quiet"]
    command += flags + extra
    console.print(f"[dim]$ {' '.join(command[2:])}[/dim]")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: some cell failed, which the comparison shows
        raise SystemExit(f"sweep exited with {done.returncode}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="examples/scaling.yaml")
    parser.add_argument("--order", default="old,new", help="which path runs first")
    parser.add_argument("--models", help="passed to sweep --models (a smaller grid)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    order = args.order.split(",")
    if sorted(order) != ["new", "old"]:
        raise SystemExit(f"--order {args.order!r}: use old,new or new,old")
    extra = ["--models", args.models] if args.models else []

    console = Console()
    work = Path(tempfile.mkdtemp(prefix="sweep-speed-"))
    walls = {}
    for path in order:
        walls[path] = sweep(args.spec, work / f"{path}.db", PATHS[path], extra, console)
        console.print(f"{path}: {walls[path]:.0f} s")

    old, new = (load_side(str(work / f"{p}.db"), work / f"{p}.db") for p in ("old", "new"))
    comparison = compare_sides(old, new)
    statuses: Counter[str] = Counter()
    verdicts: Counter[str] = Counter()
    flips = []
    for c in comparison.cells:
        base, cand = old.cells.get(c.cell.key()), new.cells.get(c.cell.key())
        same = base is not None and cand is not None and base.status == cand.status
        statuses["same" if same else "different"] += 1
        if not same:
            flips.append(
                f"{c.cell.label()}: {base.status if base else '-'} -> {cand.status if cand else '-'}"
            )
        latency = next((m for m in c.metrics if m.metric == "latency"), None)
        verdicts[latency.verdict if latency else c.verdict] += 1

    table = Table(title=f"{args.spec}: old path against new, side by side")
    for col in ("path", "wall", "repetitions/min"):
        table.add_column(col, justify="right")
    reps = {
        p: sum(len(c.repetitions) for c in s.cells.values())
        for p, s in (("old", old), ("new", new))
    }
    for p in ("old", "new"):
        table.add_row(p, f"{walls[p] / 60:.1f} min", f"{reps[p] / walls[p] * 60:.1f}")
    console.print(table)
    speedup = walls["old"] / walls["new"]
    console.print(
        f"speedup {speedup:.2f}x; statuses: {statuses['same']} cells the same, "
        f"{statuses['different']} different; latency old -> new: "
        + ", ".join(f"{n} {v}" for v, n in verdicts.most_common())
    )
    for flip in flips:
        console.print(f"  status changed: {flip}")
    console.print(f"stores kept in {work}")
    if not args.json:
        return
    write_figures(
        Path(args.json),
        "sweep_speed",
        {
            "spec": args.spec,
            "order": order,
            "wall_s": walls,
            "repetitions": reps,
            "speedup": speedup,
            "statuses": dict(statuses),
            "latency_verdicts": dict(verdicts),
            "status_changes": flips,
        },
        console,
    )


if __name__ == "__main__":
    main()
