"""Repetitions per minute of one sweep on a 1-node and on a 2-node local Ray cluster.

The same sweep (1-thread cells, eager, short protocol) runs with --executor ray on a
cluster of one node, then of two nodes, each node declaring one CPU (the head declares
none, so it only schedules). Each repetition holds its node's core and is pinned to it,
so on a machine with two free cores the two nodes measure side by side without
disturbing each other. Each cluster is warmed up (one Ray worker per node) before the
clock starts. Prints repetitions per minute for each, the ratio, and checks that every
repetition was stored exactly once.

Target: ratio >= 1.8x. Run it on a quiet machine with at least two cores:

    python benchmarks/ray_scaling.py [--models mnist-cnn,mlp] [--batch-sizes 1,8,32]
        [--repeats 3] [--min-time 0.5] [--max-time 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.execute.ray_executor import RayExecutor
from stackcost.execute.runner import execute
from stackcost.measure.protocol import Protocol
from stackcost.runspec.run import RunSpec, model_ref
from stackcost.store.database import Store

TARGET_RATIO = 1.8


def sweep(args: argparse.Namespace) -> RunSpec:
    return RunSpec(
        models=[model_ref(m) for m in args.models],
        backends=["eager"],
        resolutions=[args.resolution],
        batch_sizes=args.batch_sizes,
        threads=[1],
        repeats=args.repeats,
        protocol=Protocol(
            min_time_s=args.min_time, max_time_s=args.max_time, warmup_max_time_s=args.min_time
        ),
    )


def on_cluster(nodes: int, spec: RunSpec, db: Path) -> tuple[int, float]:
    """(repetitions stored, seconds) for the sweep on `nodes` one-CPU nodes."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        warm = ray.remote(num_cpus=1)(lambda: time.sleep(0.5))
        ray.get([warm.remote() for _ in range(nodes)])  # one Ray worker up on each node
        start = time.perf_counter()
        with Store(db) as store:
            result = execute(spec, store, executor=RayExecutor())
        return len(result.records), time.perf_counter() - start
    finally:
        ray.shutdown()
        cluster.shutdown()


def stored_once(db: Path) -> bool:
    rows = sqlite3.connect(db).execute(
        "SELECT cell_id, repetition, count(*) FROM repetitions"
        " WHERE status != 'disturbed' GROUP BY cell_id, repetition"
    )
    return all(n == 1 for *_, n in rows)


def positive_ints(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise ValueError(text)
    return values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mnist-cnn,mlp", help="comma list (default mnist-cnn,mlp)")
    ap.add_argument("--batch-sizes", default="1,8,32", help="comma list (default 1,8,32)")
    ap.add_argument("--resolution", type=int, default=28, help="input side, px (default 28)")
    ap.add_argument("--repeats", type=int, default=3, help="repetitions per cell (default 3)")
    ap.add_argument("--min-time", type=float, default=0.5, help="timed seconds (default 0.5)")
    ap.add_argument("--max-time", type=float, default=2.0, help="time cap, s (default 2)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    try:
        args.batch_sizes = positive_ints(args.batch_sizes)
    except ValueError:
        ap.error(f"--batch-sizes {args.batch_sizes!r}: give positive integers, e.g. 1,8,32")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models:
        ap.error("--models is empty: give a comma list, e.g. mnist-cnn,mlp")
    if args.repeats < 1 or args.min_time <= 0 or args.max_time < args.min_time:
        ap.error("--repeats must be >= 1 and 0 < --min-time <= --max-time")

    spec = sweep(args)
    figures: dict[str, dict[str, float]] = {}
    once = True
    with tempfile.TemporaryDirectory(prefix="stackcost-ray-scaling-") as tmp:
        for nodes in (1, 2):
            db = Path(tmp) / f"{nodes}.db"
            count, seconds = on_cluster(nodes, spec, db)
            once = once and stored_once(db)
            figures[f"{nodes} node{'s' * (nodes > 1)}"] = {
                "repetitions": count,
                "seconds": seconds,
                "per_minute": count / seconds * 60,
            }
    ratio = figures["2 nodes"]["per_minute"] / figures["1 node"]["per_minute"]

    table = Table(title="one sweep on a local Ray cluster, 1 CPU per node")
    for column in ("nodes", "repetitions", "seconds", "repetitions/min"):
        table.add_column(column, justify="right")
    for name, f in figures.items():
        table.add_row(name, str(f["repetitions"]), f"{f['seconds']:.1f}", f"{f['per_minute']:.1f}")
    console = Console()
    console.print(table)
    ok = ratio >= TARGET_RATIO and once
    console.print(
        f"2 nodes / 1 node: {ratio:.2f}x (target >= {TARGET_RATIO}x); "
        f"every repetition stored once: {'yes' if once else 'NO'}; " + ("PASS" if ok else "FAIL")
    )
    if args.json:
        payload = {"runs": figures, "ratio": ratio, "stored_once": once}
        write_figures(args.json, "ray_scaling", payload, console)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
