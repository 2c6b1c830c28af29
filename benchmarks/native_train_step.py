"""Is a training step in stackcost_libtorch's own loop as fast as the eager Python step?

ResNet-18, fp32, batch 32, 64x64, 2 threads by default, synthetic images. Both sides
start from the same weights and train on the same batches in the same order (one epoch
of `--images` samples): the eager side in this process with the eager backend's step
(`train_step`: zero_grad, forward, cross-entropy, backward, SGD step), the native side
through the program's `train` command, which times the same step in C++. Rounds
alternate (eager, program, program, eager, ...) so load on a shared machine hits both.
Each round's figure is the median of its steps after the first; the verdict compares the
median of the per-round medians: PASS if libtorch / eager <= 1.

    python benchmarks/native_train_step.py [--model resnet18] [--batch-size 32]
        [--resolution 64] [--threads 2] [--images 640] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost import zoo
from stackcost.backends.torch_common import train_step
from stackcost.cell import Cell, TrainConfig
from stackcost.native.build import ensure_built
from stackcost.native.training import epoch_orders, train_args, write_train_files
from stackcost.runspec.run import model_ref


def eager_round(model: torch.nn.Module, cell: Cell, data: tuple[Any, Any], order) -> dict:
    """One epoch in this process, timed per step as the training worker times it."""
    cfg = cell.train
    assert cfg is not None
    net = copy.deepcopy(model).train()
    step = train_step(
        net, torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum), F.cross_entropy
    )
    images, labels = data
    b = cell.batch_size
    times, losses = [], []
    for i in range(len(labels) // b):
        idx = order[i * b : (i + 1) * b]
        x, y = images.index_select(0, idx), labels.index_select(0, idx)
        t0 = time.perf_counter_ns()
        loss, _ = step(x, y)
        times.append(time.perf_counter_ns() - t0)
        losses.append(float(loss))
    return {"cold_ms": times[0] / 1e6, "steps_ms": [t / 1e6 for t in times[1:]], "losses": losses}


def program_round(executable: Path, args: dict[str, Any], threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [str(executable), "train", *(f"{k}={v}" for k, v in args.items())]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{executable.name}: {out.stderr.strip()}")
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "cold_ms": answer["cold_ns"] / 1e6,
        "steps_ms": [t / 1e6 for t in answer["samples_ns"]],
        "losses": answer["losses"],
        "process_s": time.perf_counter() - t,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", help="resnet18/34/50 or mnist-cnn")
    ap.add_argument("--batch-size", type=int, default=32, help="default 32")
    ap.add_argument("--resolution", type=int, default=64, help="input side, px (default 64)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--images", type=int, default=640, help="training samples (default 640)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each side (default 5)")
    ap.add_argument("--cache-dir", type=Path, help="native build cache (default ~/.cache)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)

    console = Console(width=None if sys.stdout.isatty() else 132)
    torch.set_num_threads(args.threads)
    with console.status("building stackcost_libtorch (cached after the first time)"):
        build = ensure_built("libtorch", args.cache_dir)

    mnist = args.model == "mnist-cnn"
    ref = model_ref(args.model, num_classes=10, in_channels=1 if mnist else 3)
    cfg = TrainConfig(epochs=1, lr=0.01, momentum=0.9, schedule="constant")
    cell = Cell(model=ref, backend="libtorch", mode="train", batch_size=args.batch_size,
                resolution=args.resolution, threads=args.threads, train=cfg)  # fmt: skip
    model = zoo.build_model(ref, args.resolution).train()
    g = torch.Generator().manual_seed(0)
    shape = (ref.in_channels, args.resolution, args.resolution)
    images = torch.rand(args.images, *shape, generator=g)
    labels = torch.randint(0, ref.num_classes, (args.images,), generator=g)
    test = (images[: args.batch_size], labels[: args.batch_size])
    order = epoch_orders(args.images, 1, cfg.data_seed)

    load_before = os.getloadavg()
    eager: list[dict[str, Any]] = []
    native: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stackcost-native-train-") as tmp:
        files = write_train_files(Path(tmp), model.state_dict(), (images, labels), test, order)
        program_args = {**train_args(cell, files), "device": "cpu"}
        if mnist:  # same computation as the eager side: dropout masks would differ
            program_args["dropout"] = "off"
            for m in model.modules():
                if isinstance(m, torch.nn.modules.dropout._DropoutNd):
                    m.p = 0.0

        def run_eager() -> None:
            eager.append(eager_round(model, cell, (images, labels), order[0]))

        def run_native() -> None:
            native.append(program_round(build.executable, program_args, args.threads))

        sides = [("eager", run_eager), ("libtorch", run_native)]
        for r in range(args.rounds):
            for name, run in sides if r % 2 == 0 else sides[::-1]:  # ABBA: neither always first
                with console.status(f"round {r + 1}/{args.rounds}: {name}"):
                    run()
    load_after = os.getloadavg()

    steps = args.images // args.batch_size
    table = Table(
        title=f"one training step: {args.model}, batch {args.batch_size}, "
        f"{args.resolution}x{args.resolution}, {args.threads} threads, SGD, "
        f"{steps} steps per round"
    )
    for col in ("round", "eager median", "libtorch median", "ratio", "eager first", "lt first"):
        table.add_column(col, justify="right")
    for i, (e, n) in enumerate(zip(eager, native, strict=True), 1):
        e_med, n_med = statistics.median(e["steps_ms"]), statistics.median(n["steps_ms"])
        e["median_ms"], n["median_ms"] = e_med, n_med
        table.add_row(str(i), f"{e_med:.2f} ms", f"{n_med:.2f} ms", f"{n_med / e_med:.4f}",
                      f"{e['cold_ms']:.1f} ms", f"{n['cold_ms']:.1f} ms")  # fmt: skip
    e_all = statistics.median(e["median_ms"] for e in eager)
    n_all = statistics.median(n["median_ms"] for n in native)
    ratio = n_all / e_all
    table.add_section()
    table.add_row("median", f"{e_all:.2f} ms", f"{n_all:.2f} ms", f"{ratio:.4f}", "", "")
    console.print(table)

    # Same weights, same batches: the two sides must have trained the same way.
    loss_rel = max(
        abs(a - b) / abs(b) for a, b in zip(native[0]["losses"], eager[0]["losses"], strict=True)
    )

    rounds = list(zip(eager, native, strict=True))
    paired = statistics.median(n["median_ms"] / e["median_ms"] for e, n in rounds)

    def spread(rows: list[dict[str, Any]]) -> float:
        values = [r["median_ms"] for r in rows]
        return (max(values) - min(values)) / statistics.median(values)

    # Foreign load only ever adds time: the fastest step is the figure it disturbs least.
    e_min = min(min(e["steps_ms"]) for e in eager)
    n_min = min(min(n["steps_ms"]) for n in native)
    console.print(
        f"[dim]Losses of the two sides agree to {loss_rel:.2g} (max relative difference). "
        f"Fastest step: eager {e_min:.2f} ms, libtorch {n_min:.2f} ms (ratio "
        f"{n_min / e_min:.4f}). Median of per-round ratios {paired:.4f}. Round-to-round spread: eager "
        f"{spread(eager):.1%}, libtorch {spread(native):.1%}. Load average (1 min) "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after.[/dim]"
    )
    noisy = max(spread(eager), spread(native)) > 0.10
    ok = ratio <= 1.0
    console.print(
        f"[bold {'green' if ok else 'red'}]{'PASS' if ok else 'FAIL'}[/]: libtorch / eager = "
        f"{ratio:.4f} ({ratio - 1:+.2%}; target <= 1)"
        + (" — rounds disagree by >10%: the machine was busy, rerun when quiet" if noisy else "")
    )
    if args.json:
        figures = {
            "torch": torch.__version__,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "build_key": build.key,
            "eager": [{k: v for k, v in e.items() if k != "losses"} for e in eager],
            "libtorch": [{k: v for k, v in n.items() if k != "losses"} for n in native],
            "eager_median_ms": e_all,
            "libtorch_median_ms": n_all,
            "ratio": ratio,
            "median_paired_ratio": paired,
            "eager_fastest_ms": e_min,
            "libtorch_fastest_ms": n_min,
            "noisy": noisy,
            "loss_max_rel_diff": loss_rel,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "pass": ok,
        }
        write_figures(args.json, "native_train_step", figures, console)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
