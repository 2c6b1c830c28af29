"""Each cell's achieved FLOP/s against the measured peak of its precision on its device.

One `stackcost run --profile` (a fresh process, its own store) of one model over the
precisions a GPU runs (fp32 with TF32 off, tf32, bf16, fp16, amp), then, per cell: its
FLOPs per batch (torch FlopCounterMode), its median step, the achieved TFLOP/s, and the
peak the report holds it to: on cuda the GPU's matmul peak at the cell's precision
(`stackcost peaks --device cuda`: fp32/tf32/bf16/fp16, amp -> fp16), on cpu the GEMM peak
at the cell's thread count. The run stores the peaks it used in its environment, so the
same figures come back from `stackcost report --db DB`.

Verdict: OK when every cell that has a peak lands in (0, 100]% of it; a cell above 100%
means a peak measured too low or a FLOP count too high, and is named. Not a speed target.

    python benchmarks/roofline.py [--device cuda|cpu] [--model resnet50] [--resolution 224] \
        [--batch-sizes 32] [--backends eager] [--precisions fp32,tf32,bf16,fp16,amp] \
        [--min-time 1] [--quick] [--db PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from _figures import write_figures

DEFAULTS = {
    "cuda": {"model": "resnet50", "resolution": 224, "batch_sizes": "32",
             "precisions": "fp32,tf32,bf16,fp16,amp", "min_time": 1.0},
    "cpu": {"model": "resnet50", "resolution": 224, "batch_sizes": "8",
            "precisions": "fp32,bf16", "min_time": 2.0},
}  # fmt: skip
QUICK = {"model": "resnet18", "resolution": 32, "batch_sizes": "1", "min_time": 0.1}


def cells(db: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each stored cell's figures and the peak it is held to; the run's env peaks."""
    from stackcost.api import load
    from stackcost.measure.peaks import cell_peaks, percent_of_peak

    run = load(db)
    env_peaks = (run.env or {}).get("peaks") or {}
    out = []
    for cell, rep in run.records:
        peaks = cell_peaks(env_peaks, cell.device, cell.threads)
        peak = peaks.peak(cell.precision) if peaks is not None else None
        g = rep.achieved_gflops
        out.append(
            {
                "backend": cell.backend,
                "precision": cell.precision,
                "batch_size": cell.batch_size,
                "device": cell.device,
                "threads": cell.threads,
                "status": rep.status,
                "reason": rep.reason,
                "median_ms": rep.stats.median_ms if rep.stats else None,
                "gflop_per_batch": rep.work.flops / 1e9 if rep.work else None,
                "achieved_gflops": g,
                "peak_name": peak[0] if peak else None,
                "peak_gflops": peak[1] if peak else None,
                "percent_of_peak": (
                    percent_of_peak(g, peaks, cell.precision) if g and peaks else None
                ),
                "details": rep.details,
            }
        )
    return out, env_peaks


def _t(gflops: float | None, scale: float) -> str:
    return "—" if gflops is None else f"{gflops / scale:,.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--model", help="zoo model (default resnet50)")
    ap.add_argument("--resolution", type=int, help="input side, px (default 224)")
    ap.add_argument("--batch-sizes", help="comma list (default: cuda 32, cpu 8)")
    ap.add_argument("--backends", default="eager", help="comma list (default eager)")
    ap.add_argument("--precisions", help="comma list (default: cuda fp32,tf32,bf16,fp16,amp; "
                    "cpu fp32,bf16)")  # fmt: skip
    ap.add_argument("--threads", type=int, help="threads (default: stackcost's)")
    ap.add_argument("--min-time", type=float, help="timed seconds per cell (default: cuda 1)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: resnet18, 32 px, batch 1, 0.1 s (explicit flags win)")  # fmt: skip
    ap.add_argument("--db", type=Path, help="keep the run's store here (default: a temp dir)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    if args.device not in DEFAULTS:
        ap.error(f"--device {args.device!r}: use cpu or cuda")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                "roofline.py: error: --device cuda: no CUDA device here "
                "(torch.cuda.is_available() is False); use --device cpu",
                file=sys.stderr,
            )
            return 2
    for key, value in {**DEFAULTS[args.device], **(QUICK if args.quick else {})}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    console = Console(width=None if sys.stdout.isatty() else 160)
    with tempfile.TemporaryDirectory(prefix="stackcost-roofline-") as tmp:
        db = args.db or Path(tmp) / "roofline.db"
        cmd = [
            sys.executable, "-m", "stackcost.cli", "run", args.model, "--device", args.device,
            "--backends", args.backends, "--precision", args.precisions,
            "--batch-size", args.batch_sizes, "--resolution", str(args.resolution),
            "--min-time", str(args.min_time), "--profile", "--quiet", "--db", str(db),
            *(["--threads", str(args.threads)] if args.threads else []),
        ]  # fmt: skip
        start = time.perf_counter()
        with console.status(f"stackcost run --profile on {args.device}"):
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if not db.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()
            console.print(f"[red]the run stored nothing (rc {done.returncode}):[/] "
                          f"{escape(tail[-1] if tail else '')}")  # fmt: skip
            return 1
        rows, env_peaks = cells(db)

    table = Table(
        title=f"{args.model} at {args.resolution} px on {args.device}: achieved vs measured peak"
        + (" — quick" if args.quick else "")
    )
    unit, scale = ("TFLOP/s", 1e3) if args.device == "cuda" else ("GFLOP/s", 1.0)
    for col in ("backend", "precision", "batch", "status", "median", "GFLOP/batch",
                f"achieved {unit}", "peak", f"peak {unit}", "% of peak"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("backend", "precision", "status",
                                                         "peak") else "right")  # fmt: skip
    for r in rows:
        pct = r["percent_of_peak"]
        table.add_row(
            escape(r["backend"]), r["precision"], str(r["batch_size"]),
            escape(r["status"]),
            "—" if r["median_ms"] is None else f"{r['median_ms']:.3f} ms",
            "—" if r["gflop_per_batch"] is None else f"{r['gflop_per_batch']:.3g}",
            _t(r["achieved_gflops"], scale), escape(r["peak_name"] or "no peak"),
            _t(r["peak_gflops"], scale),
            "—" if pct is None else f"{pct:.1f}%",
        )  # fmt: skip
    console.print(table)
    gpu = env_peaks.get("cuda")
    if gpu:
        console.print(
            f"[dim]GPU peaks ({escape(gpu['name'])}, measured {gpu['measured_at']}): "
            + ", ".join(
                f"{p} {gpu[f'{p}_gflops'] / 1e3:,.1f}" for p in ("fp32", "tf32", "bf16", "fp16")
            )
            + f" TFLOP/s; copy {gpu['copy_gbs']:,.0f} GB/s. {escape(gpu['gemm_method'])}[/dim]"
        )
    failed = [r for r in rows if r["status"] not in ("ok", "disturbed")]
    for r in failed:
        console.print(f"[yellow]{escape(r['backend'])} {r['precision']} b{r['batch_size']}: "
                      f"{escape(r['status'])}: {escape(str(r['reason'] or ''))[:160]}[/]")  # fmt: skip
    held = [r for r in rows if r["percent_of_peak"] is not None]
    over = [r for r in held if not 0 < r["percent_of_peak"] <= 100]
    ok = bool(held) and not over
    for r in over:
        console.print(f"[red]{r['backend']} {r['precision']} b{r['batch_size']}: "
                      f"{r['percent_of_peak']:.1f}% of {escape(r['peak_name'])}[/]")  # fmt: skip
    console.print(
        f"[bold {'green' if ok else 'red'}]{'OK' if ok else 'CHECK'}[/]: {len(held)} of "
        f"{len(rows)} cells held to a measured peak, {len(over)} outside (0, 100]%; "
        f"run took {wall:.0f} s"
    )
    if args.json:
        figures = {
            "device": args.device, "quick": args.quick, "model": args.model,
            "resolution": args.resolution, "batch_sizes": args.batch_sizes,
            "backends": args.backends, "precisions": args.precisions,
            "min_time_s": args.min_time, "cells": rows, "peaks": env_peaks,
            "ok": ok, "wall_s": wall, "command": cmd[2:],
        }  # fmt: skip
        write_figures(args.json, "roofline", figures, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
