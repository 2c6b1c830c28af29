"""Is XLA slow at small images, or is it how stackcost runs it? stackcost's `jax` and
`tf-xla` rungs against bare loops on the same converted model, interleaved.

resnet18 at a small resolution (default 64 px, batch 4) ran at 0.12-0.13x eager under
stackcost's XLA rungs (about 110 ms against 13.7 ms; issue 26), while at 224 px XLA
matched TensorFlow's own graph. Each block runs, in fresh processes and ABBA order per
rung, `stackcost run resnet18 --backends RUNG --repeats 1` and a bare peer: a process that
builds the same Keras model with the same converted weights (stackcost's keras_models,
the conversion every Keras rung uses) and times `jax.jit(model.stateless_call)` or
`tf.function(model, jit_compile=True)` with time.perf_counter, with the framework's
default thread pools and no affinity, after a warmup. Eager is timed the same two ways.

    python benchmarks/xla_peer.py [--blocks 5] [--resolution 64] [--batch-size 4]
        [--rungs eager,jax,tf-xla] [--threads 2] [--json PATH]

Nothing else may run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

BARE_TIME_S = 1.0


def bare(rung: str, resolution: int, batch: int) -> float:
    """In a fresh process: the rung's call, timed bare; median ms."""
    import numpy as np
    import torch

    from stackcost import zoo
    from stackcost.runspec.run import model_ref

    ref = model_ref("resnet18")
    model = zoo.build_model(ref, resolution).eval()
    x = torch.randn(batch, 3, resolution, resolution, generator=torch.Generator().manual_seed(1))
    if rung == "eager":

        def step():
            with torch.inference_mode():
                return model(x)

    else:
        from stackcost.backends.keras_models import family, nhwc, to_keras

        keras_model = to_keras(model, family("resnet18") or "", tuple(x.shape[1:]))
        xs = nhwc(x.numpy())
        if rung == "jax":
            import jax

            tv = [v.value for v in keras_model.trainable_variables]
            ntv = [v.value for v in keras_model.non_trainable_variables]
            fwd = jax.jit(lambda t, n, a: keras_model.stateless_call(t, n, a, training=False)[0])
            placed = jax.device_put(xs)

            def step():
                return np.asarray(fwd(tv, ntv, placed))

        else:
            import tensorflow as tf

            fwd = tf.function(lambda a: keras_model(a, training=False), jit_compile=True)
            placed = tf.constant(xs)

            def step():
                return fwd(placed).numpy()

    for _ in range(5):
        step()
    times = []
    end = time.perf_counter() + BARE_TIME_S
    while time.perf_counter() < end or len(times) < 10:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run_stackcost(rung: str, args: argparse.Namespace, work: Path, i: int) -> dict:
    db = work / f"{rung}-{i}.db"
    argv = [sys.executable, "-m", "stackcost.cli", "run", "resnet18", "--backends", rung]
    argv += ["--batch-size", str(args.batch_size), "--resolution", str(args.resolution)]
    argv += ["--threads", str(args.threads), "--repeats", "1", "--min-time", "1", "--quiet"]
    argv += ["--on-disturbed", "keep", "--db", str(db)]
    subprocess.run(argv, capture_output=True, text=True)
    from stackcost.api import load

    (cell,) = load(db).cells()
    rep = cell.repetitions[0]
    details = rep.details or {}
    return {
        "ms": rep.stats.median_ms if rep.stats else None,
        "status": rep.status,
        "threads": {k: v for k, v in details.items() if "thread" in k or k == "xla_flags"},
    }


def run_bare(rung: str, args: argparse.Namespace) -> float | None:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow" if rung == "tf-xla" else "jax"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    argv = [sys.executable, __file__, "--child", rung, "--resolution", str(args.resolution)]
    argv += ["--batch-size", str(args.batch_size)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    try:
        return float(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(proc.stderr[-800:], file=sys.stderr)
        return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--rungs", default="eager,jax,tf-xla")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(bare(args.child, args.resolution, args.batch_size))
        return
    console = Console()
    rungs = [r for r in args.rungs.split(",") if r]
    results: dict[str, dict[str, list]] = {
        r: {"stackcost": [], "bare": [], "status": []} for r in rungs
    }
    seen: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="stackcost-xla-") as tmp:
        for i in range(args.blocks):
            for rung in rungs:
                order = ("stackcost", "bare") if i % 2 == 0 else ("bare", "stackcost")
                for side in order:
                    if side == "stackcost":
                        got = run_stackcost(rung, args, Path(tmp), i)
                        results[rung]["stackcost"].append(got["ms"])
                        results[rung]["status"].append(got["status"])
                        seen[rung] = got["threads"]
                    else:
                        results[rung]["bare"].append(run_bare(rung, args))
                sc, b = results[rung]["stackcost"][-1], results[rung]["bare"][-1]
                console.print(
                    f"block {i + 1} {rung}: stackcost {sc} ms, bare {b} ms", highlight=False
                )
    t = Table(
        title=f"resnet18 b{args.batch_size} {args.resolution}px, {args.threads} threads (stackcost)",
        title_justify="left",
    )
    for col in (
        "rung",
        "stackcost (ms)",
        "bare (ms)",
        "stackcost / bare",
        "vs eager (stackcost)",
        "vs eager (bare)",
        "stackcost's threads",
    ):
        t.add_column(col)
    med = {
        r: {
            k: statistics.median([v for v in results[r][k] if v]) if any(results[r][k]) else None
            for k in ("stackcost", "bare")
        }
        for r in rungs
    }
    for r in rungs:
        sc, b = med[r]["stackcost"], med[r]["bare"]
        e = med.get("eager", {})
        t.add_row(
            r,
            f"{sc:.2f}" if sc else "—",
            f"{b:.2f}" if b else "—",
            f"{sc / b:.3f}" if sc and b else "—",
            f"{e['stackcost'] / sc:.2f}x" if e.get("stackcost") and sc else "—",
            f"{e['bare'] / b:.2f}x" if e.get("bare") and b else "—",
        )
    console.print(t)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": vars(args) | {"json": str(args.json)},
                    "results": results,
                    "medians": med,
                    "stackcost_threads": seen,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
