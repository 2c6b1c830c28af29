"""Which core each of a burst pair's two workers runs on, and what it costs the pair.

`ab`'s bursts design starts one fresh worker a side per block and alternates short bursts
between them (execute/interleave.py). At 1 thread on a 2-core machine, neither worker is
told where to run: the kernel wakes each on the core it last ran on, so the two may sit on
different cores for the whole block, and a burst pair compares cores as well as sides.
On a virtual machine one core can be slowed for seconds by a neighbour on the host.

This benchmark runs gate-like A/A blocks of a knob_model model outside stackcost, so the
placement is the only thing that changes: two fresh worker processes a block, --pairs
burst pairs in random order, each burst --steps steps after one untimed step. Each block
is one of two arms, interleaved in a shuffled order per round:
- `free`: the workers unpinned, as the kernel places them;
- `same`: both pinned to one core drawn per block (`ab --same-cores`).

Per block it records the mean log ratio of its pairs, the pairs' standard error, and the
core each worker's bursts ran on (read from /proc/self/stat after each burst). Per arm it
prints the SD of the block estimates (what a gate's interval is built from) against the
mean within-block standard error, and an F-test of the two arms' block variances.

    PYTHONPATH=benchmarks python benchmarks/core_placement.py [--blocks 20] \
        [--model model] [--batch 32] [--input-shape 256] [--json PATH]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scipy import stats

ARMS = ("free", "same")

# One worker: build the model, warm it, then time a burst per line on stdin and answer
# "<ns> <core>" (the core from /proc/self/stat's 39th field, where it last ran).
WORKER = """
import sys, time
import torch
import knob_model
torch.set_num_threads(1)
name, batch, shape, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
model = getattr(knob_model, name)(0.0).eval()
x = torch.randn(batch, *map(int, shape.split(",")))
def core():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])
with torch.inference_mode():
    for _ in range(50):
        model(x)
    print("ready", flush=True)
    for _ in sys.stdin:
        model(x)
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            model(x)
        print(time.perf_counter_ns() - t0, core(), flush=True)
"""


def block(arm: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    """One A/A block: two fresh workers, `args.pairs` burst pairs in random order."""
    cores = sorted(os.sched_getaffinity(0))
    pinned = {rng.choice(cores)} if arm == "same" else None
    here = str(Path(__file__).resolve().parent)  # knob_model, wherever it is started from
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": here}
    argv = [sys.executable, "-c", WORKER, args.model, str(args.batch), args.input_shape,
            str(args.steps)]  # fmt: skip
    workers = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                         preexec_fn=(lambda: os.sched_setaffinity(0, pinned)) if pinned else None)
        for _ in range(2)
    ]  # fmt: skip
    for w in workers:
        assert w.stdout and w.stdout.readline().strip() == "ready"
    logs, ran_on = [], [[], []]
    for _ in range(args.pairs):
        ns = {}
        for i in rng.sample((0, 1), 2):
            assert workers[i].stdin and workers[i].stdout
            workers[i].stdin.write("burst\n")
            workers[i].stdin.flush()
            took, core = workers[i].stdout.readline().split()
            ns[i] = int(took)
            ran_on[i].append(int(core))
        logs.append(math.log(ns[1] / ns[0]))
    for w in workers:
        assert w.stdin
        w.stdin.close()
        w.wait()
    return {
        "arm": arm,
        "pinned": sorted(pinned) if pinned else None,
        "log_ratio": statistics.fmean(logs),
        "pairs_se": statistics.stdev(logs) / math.sqrt(len(logs)),
        "cores": [statistics.mode(r) for r in ran_on],  # each worker's usual core
        "moved": [len(set(r)) > 1 for r in ran_on],  # whether it ran on another one too
    }


def summary(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: the block estimates' SD, the mean within-block SE, and how often the two
    workers sat on different cores; and the F-test of free's block variance over same's."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [b for b in blocks if b["arm"] == arm]
        out[arm] = {
            "blocks": len(mine),
            "between_sd": statistics.stdev(b["log_ratio"] for b in mine),
            "within_se": statistics.fmean(b["pairs_se"] for b in mine),
            "apart": sum(b["cores"][0] != b["cores"][1] for b in mine),
        }
    f = (out["free"]["between_sd"] / out["same"]["between_sd"]) ** 2
    df = (out["free"]["blocks"] - 1, out["same"]["blocks"] - 1)
    out["f_free_over_same"] = {"f": f, "p_one_sided": float(stats.f.sf(f, *df))}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=20, help="blocks per arm")
    ap.add_argument("--pairs", type=int, default=30, help="burst pairs a block")
    ap.add_argument("--steps", type=int, default=40, help="timed steps a burst")
    ap.add_argument("--model", default="model", help="a knob_model factory (model: matmul)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--input-shape", default="256")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("core_placement: needs 2+ cores to place two workers apart")
    from stackcost.env import cpu_info

    rng = random.Random(args.seed)
    started, blocks = time.perf_counter(), []
    for r in range(args.blocks):
        for arm in rng.sample(ARMS, 2):
            b = block(arm, args, rng) | {"round": r + 1}
            blocks.append(b)
            print(f"{r + 1:3d} {arm:4s} {math.expm1(b['log_ratio']):+7.2%} "
                  f"±{b['pairs_se']:.2%} on {b['cores']}", flush=True)  # fmt: skip
    result = summary(blocks)
    for arm in ARMS:
        s = result[arm]
        print(f"{arm}: blocks differ by {s['between_sd']:.2%} (SD of log ratios), their pairs "
              f"explain {s['within_se']:.2%}; workers apart in {s['apart']}/{s['blocks']}")  # fmt: skip
    f = result["f_free_over_same"]
    print(f"free/same block variance: F = {f['f']:.2f}, one-sided p = {f['p_one_sided']:.3f}")
    if args.json:
        record = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_info(),
                  "settings": {k: str(v) for k, v in vars(args).items() if k != "json"},
                  "summary": result, "blocks": blocks,
                  "wall_s": time.perf_counter() - started}  # fmt: skip
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
