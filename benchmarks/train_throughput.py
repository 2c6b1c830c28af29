"""Training throughput per backend: samples/s of forward + backward + optimizer step.

Each backend trains the same initial weights (saved once here, loaded by every worker) on
the same data for a few epochs, one repetition in a fresh worker process, exactly as
`stackcost train` runs it. The step rate is batch / median step (the first step, compile
included, is shown apart); the epoch rate is samples / train-loop wall time over the epochs
after the first (so it includes loader wait and copies, but not the compile).

    python benchmarks/train_throughput.py [--backends eager,inductor,torchscript]
        [--model resnet18] [--dataset digits] [--batch-size 64] [--resolution 32]
        [--epochs 2] [--threads 2] [--limit N] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.backends import load_backend
from stackcost.cell import Cell, TrainConfig
from stackcost.commands.axes import cores
from stackcost.data import DATASETS
from stackcost.errors import SpecError
from stackcost.execute.local import LocalExecutor
from stackcost.execute.probe import learn
from stackcost.result import RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.runspec.train import check_backend_names, check_backends, check_data
from stackcost.scenarios.task import TrainTask


def row(backend: str, result: RepetitionResult, wall_s: float, batch: int) -> dict[str, Any]:
    epochs = result.epochs
    later = [e.train_samples_per_s for e in epochs[1:]] or [e.train_samples_per_s for e in epochs]
    train_s = sum(e.train_s for e in epochs)
    return {
        "backend": backend,
        "status": result.status,
        "reason": result.reason,
        "variant": result.details.get("variant") or result.details.get("compiled"),
        "step_median_ms": result.stats.median_ms if result.stats else None,
        "step_samples_per_s": batch / (result.stats.median_ms / 1e3) if result.stats else None,
        "epoch_samples_per_s": statistics.median(later) if later else None,
        "eval_samples_per_s": epochs[-1].eval_samples_per_s if epochs else None,
        "first_step_ms": result.cold_start_ms,
        "prepare_s": result.phases.prepare_s,
        "loader_wait_share": sum(e.loader_wait_s for e in epochs) / train_s if train_s else None,
        "eval_accuracy": epochs[-1].eval_accuracy if epochs else None,
        "weights_digest": result.weights_digest,
        "wall_s": wall_s,
    }


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="eager,inductor,torchscript", help="comma list")
    ap.add_argument("--model", default="resnet18", help="zoo model (default resnet18)")
    ap.add_argument("--dataset", default="digits", help="digits (default) or synthetic")
    ap.add_argument("--batch-size", type=int, default=64, help="default 64")
    ap.add_argument("--resolution", type=int, default=32, help="input side, px (default 32)")
    ap.add_argument("--epochs", type=int, default=2, help="default 2 (epoch 1 pays compiles)")
    ap.add_argument("--threads", type=int, default=cores(), help=f"default {cores()}")
    ap.add_argument("--limit", type=int, help="first N samples of each split")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per repetition, s")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)

    console = Console(width=None if sys.stdout.isatty() else 150)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    try:
        check_data(args.dataset, None)
        check_backend_names(backends)
        check_backends(backends, learn({name: {} for name in backends}))
    except SpecError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    info = DATASETS[args.dataset]
    ref = model_ref(
        args.model,
        num_classes=info.num_classes or 10,
        in_channels=info.native_shape[0] if info.native_shape else 3,
    )
    config = TrainConfig(dataset=args.dataset, epochs=args.epochs, limit=args.limit)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stackcost-train-bench-") as tmp:
        import torch

        from stackcost import zoo

        model = zoo.build_model(ref, args.resolution)
        weights = Path(tmp) / "initial.pt"
        torch.save(model.state_dict(), weights)
        digest = zoo.weights_digest(model)
        for i, name in enumerate(backends):
            cell = Cell(
                model=ref,
                backend=name,
                mode="train",
                batch_size=args.batch_size,
                resolution=args.resolution,
                threads=args.threads,
                train=config,
            )
            problem = load_backend(name).capabilities.why_not(cell)
            if problem:
                rows.append({"backend": name, "status": "unsupported", "reason": problem})
                continue
            task = TrainTask(
                cell=cell,
                timeout_s=args.timeout,
                workdir=str(Path(tmp) / str(i)),
                weights_path=str(weights),
                weights_digest=digest,
            )
            console.print(f"[dim]training {cell.label()} ...[/dim]")
            t0 = time.perf_counter()
            result = LocalExecutor().run(task)
            rows.append(row(name, result, time.perf_counter() - t0, args.batch_size))

    table = Table(
        title=f"training throughput: {args.model} on {args.dataset}, batch {args.batch_size}, "
        f"{args.resolution}x{args.resolution}, {args.epochs} epochs, {args.threads} threads",
        header_style="bold",
    )
    for col in (
        "backend",
        "status",
        "variant",
        "step median (ms)",
        "step rate (samples/s)",
        "epoch rate (samples/s)",
        "eval rate (samples/s)",
        "first step (s)",
        "loader wait (%)",
        "eval acc (%)",
        "wall (s)",
    ):
        table.add_column(
            col, justify="left" if col in ("backend", "status", "variant") else "right"
        )
    for r in rows:
        ok = r["status"] == "ok"
        table.add_row(
            r["backend"],
            r["status"] if ok else f"{r['status']}: {r['reason'][:50]}",
            str(r.get("variant") or "—")[:24],
            fmt(r.get("step_median_ms"), ".1f"),
            fmt(r.get("step_samples_per_s"), ",.0f"),
            fmt(r.get("epoch_samples_per_s"), ",.0f"),
            fmt(r.get("eval_samples_per_s"), ",.0f"),
            fmt(r["first_step_ms"] / 1e3 if r.get("first_step_ms") else None, ".2f"),
            fmt(r["loader_wait_share"] * 100 if r.get("loader_wait_share") else None, ".2f"),
            fmt(r["eval_accuracy"] * 100 if r.get("eval_accuracy") is not None else None, ".1f"),
            fmt(r.get("wall_s"), ".1f"),
        )
    console.print(table)
    digests = {r.get("weights_digest") for r in rows if r.get("weights_digest")}
    console.print(f"initial weights digest: {', '.join(sorted(digests)) or '—'} (one = identical)")
    if args.json:
        write_figures(
            args.json,
            "train_throughput",
            {"args": vars(args) | {"json": str(args.json)}, "rows": rows},
            console,
        )
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
