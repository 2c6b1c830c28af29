"""Each allocator's spreads over a family of cells: within a process and between processes.

The family is family.py's. Per round, each allocator (stackcost.allocators) in a shuffled
order runs every cell once with `stackcost run --repeats 1 --allocator NAME`: a fresh
process per cell, so after --rounds rounds each cell has that many processes per
allocator, taken interleaved. The table gives each cell's spreads under each allocator (measure/stats.spreads over the
processes' samples), its process medians, the page faults a step they took and the MiB
they held on transparent huge pages.

    python benchmarks/allocator_family.py [--rounds 4] [--allocators glibc,steady,huge]
        [--members 0,2,...] [--min-time 1] [--json PATH]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from family import FAMILY
from stackcost.allocators import ALLOCATORS
from stackcost.env import cpu_info
from stackcost.store.runs import load_runs

HERE = Path(__file__).resolve().parent


def run(argv: list[str], allocator: str, db: Path, min_time: float) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    full = [sys.executable, "-m", "stackcost.cli", "run", *argv, "--repeats", "1"]
    full += ["--allocator", allocator, "--min-time", str(min_time), "--quiet", "--db", str(db)]
    proc = subprocess.run(full, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(full)}: {(proc.stderr or proc.stdout).strip()[-600:]}")


def cells(db: Path) -> dict[str, dict[str, Any]]:
    """Per cell label: every valid repetition's samples and page faults, over all runs."""
    from stackcost.measure.stats import spreads

    found: dict[str, dict[str, Any]] = {}
    for result in load_runs(db, [], every=True):
        for cell in result.cells():
            entry = found.setdefault(cell.cell.label(), {"samples": [], "faults": [], "huge": []})
            for r in cell.repetitions:
                if r.valid and r.samples_ns:
                    entry["samples"].append(r.samples_ns)
                    entry["faults"].append(r.details.get("page_faults_per_step"))
                    entry["huge"].append(r.details.get("anon_huge_pages_mib"))
    out = {}
    for label, entry in found.items():
        s = spreads(entry["samples"])
        out[label] = {
            "within": s.within,
            "between": s.between,
            "processes": s.processes,
            "medians_ms": [statistics.median(x) / 1e6 for x in entry["samples"]],
            "page_faults_per_step": entry["faults"],
            "anon_huge_pages_mib": entry["huge"],
        }
    return out


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--members", help="comma list of family.py indices (default: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    allocators = args.allocators.split(",")
    for name in allocators:
        if name not in ALLOCATORS:
            raise SystemExit(f"--allocators: {name!r} is not one of {', '.join(ALLOCATORS)}")
    chosen = [int(i) for i in args.members.split(",")] if args.members else range(len(FAMILY))
    rng = random.Random(args.seed)
    console = Console()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stackcost-family-") as tmp:
        dbs = {name: Path(tmp) / f"{name}.db" for name in allocators}
        for i in range(args.rounds):
            for name in rng.sample(allocators, len(allocators)):
                for member in chosen:
                    run(FAMILY[member].run_args(), name, dbs[name], args.min_time)
            console.print(f"round {i + 1}/{args.rounds} ({time.perf_counter() - started:.0f} s)")
        by_allocator = {name: cells(db) for name, db in dbs.items()}
    table = Table(title="spread within / between processes, by allocator (this machine)")
    table.add_column("cell")
    for name in allocators:
        table.add_column(f"{name}: in / between", justify="right")
        table.add_column(f"{name}: medians ms", justify="right")
        table.add_column(f"{name}: faults a step", justify="right")
        table.add_column(f"{name}: huge MiB", justify="right")
    labels = sorted({label for found in by_allocator.values() for label in found})
    for label in labels:
        row = [label]
        for name in allocators:
            c = by_allocator[name].get(label)
            if c is None:
                row += ["—", "—", "—", "—"]
                continue
            row.append(f"{pct(c['within'])} / {pct(c['between'])}")
            row.append(" ".join(f"{m:.3g}" for m in c["medians_ms"]))
            faults = [f for f in c["page_faults_per_step"] if f is not None]
            row.append(f"{min(faults):.0f}–{max(faults):.0f}" if faults else "—")
            huge = [h for h in c.get("anon_huge_pages_mib", []) if h is not None]
            row.append(f"{min(huge):.0f}–{max(huge):.0f}" if huge else "—")
        table.add_row(*row)
    console.print(table)
    if args.json:
        record = {
            "date": time.strftime("%Y-%m-%d"),
            "cpu": cpu_info(),
            "settings": {k: v for k, v in vars(args).items() if k != "json"},
            "family": [member.what for member in FAMILY],
            "cells": by_allocator,
            "wall_s": time.perf_counter() - started,
        }
        args.json.write_text(json.dumps(record, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
