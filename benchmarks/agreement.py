"""Does stackcost's engine agree with torch.utils.benchmark on the same step?

ResNet-18, eager, fp32, batch 1, 2 threads: the step the eager backend prepares is timed
by stackcost's measure() and by torch.utils.benchmark.Timer.blocked_autorange, alternating
(engine, Timer, engine, Timer, ...) in one process so both see the same machine state.
The verdict compares the median of each side's per-round medians: PASS within 3%.

blocked_autorange's median is a median of per-block means (a block is `number_per_run`
calls), not of single iterations; at block size 1 the two are the same quantity.

    python benchmarks/agreement.py [--resolution 224] [--rounds 3] [--min-time 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.utils.benchmark as tb
from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost import zoo
from stackcost.backends import PrepareContext, load_backend
from stackcost.cell import Cell
from stackcost.measure.protocol import Protocol, measure
from stackcost.measure.timer import CpuTimer
from stackcost.spec.run import model_ref

TOLERANCE = 0.03


def build_step(resolution: int, threads: int, workdir: Path):
    """The eager backend's step, built the way a worker builds it."""
    ref = model_ref("resnet18")
    cell = Cell(model=ref, backend="eager", resolution=resolution, threads=threads)
    model = zoo.build_model(ref, resolution)
    generator = torch.Generator().manual_seed(ref.seed + 1)
    example = torch.randn(cell.input_shape(), generator=generator)
    prepared = load_backend("eager").prepare(model, example, cell, PrepareContext(workdir))
    return prepared.step


def engine_once(step, protocol: Protocol) -> dict[str, Any]:
    m = measure(step, CpuTimer(), protocol)
    assert m.stats is not None
    return {
        "median_ms": m.stats.median_ms,
        "mean_ms": m.stats.mean_ms,
        "iqr_ms": m.stats.iqr_ms,
        "n": m.stats.n,
        "stop_reason": m.stop_reason,
        "warmup_iters": m.warmup_iters,
    }


def timer_once(step, threads: int, min_run_time: float) -> dict[str, Any]:
    timer = tb.Timer(stmt="step()", globals={"step": step}, num_threads=threads)
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return {
        "median_ms": m.median * 1e3,  # median of per-block means
        "mean_ms": m.mean * 1e3,
        "iqr_ms": m.iqr * 1e3,
        "n": len(m.times),
        "block_size": m.number_per_run,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resolution", type=int, default=224, help="input side, px (default 224)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    # Many short rounds rather than a few long ones: a burst of foreign load then spoils
    # a minority of rounds, which the median of medians discards.
    ap.add_argument("--rounds", type=int, default=7, help="rounds of engine + Timer (default 7)")
    ap.add_argument(
        "--min-time", type=float, default=1.0, help="timed seconds per measurement, each side"
    )
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)

    # Piped output would otherwise wrap at 80 columns and mangle the table.
    console = Console(width=None if sys.stdout.isatty() else 132)
    torch.set_num_threads(args.threads)
    # Same timed budget on both sides; caps generous enough that a steady step converges.
    protocol = Protocol(
        min_time_s=args.min_time, max_time_s=max(5.0, 3 * args.min_time), warmup_max_time_s=3
    )
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="stackcost-agreement-") as tmp:
        step = build_step(args.resolution, args.threads, Path(tmp))
        # One untimed second first, so neither side gets the process's first forwards.
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            step()
        engine: list[dict[str, Any]] = []
        timer: list[dict[str, Any]] = []
        for r in range(args.rounds):
            with console.status(f"round {r + 1}/{args.rounds}: stackcost engine"):
                engine.append(engine_once(step, protocol))
            with console.status(f"round {r + 1}/{args.rounds}: torch.utils.benchmark.Timer"):
                timer.append(timer_once(step, args.threads, args.min_time))

    table = Table(
        title=f"resnet18 eager fp32, batch 1, {args.resolution}px, {args.threads} threads"
    )
    for col in ("round", "engine median", "engine n", "Timer median", "Timer blocks", "ratio"):
        table.add_column(col, justify="right")
    rounds = list(zip(engine, timer, strict=True))
    for i, (e, t) in enumerate(rounds, 1):
        table.add_row(
            str(i),
            f"{e['median_ms']:.3f} ms",
            f"{e['n']} ({e['stop_reason']})",
            f"{t['median_ms']:.3f} ms",
            f"{t['n']} × {t['block_size']}",
            f"{e['median_ms'] / t['median_ms']:.4f}",
        )
    load_after = os.getloadavg()
    e_med = statistics.median(e["median_ms"] for e in engine)
    t_med = statistics.median(t["median_ms"] for t in timer)
    ratio = e_med / t_med
    table.add_section()
    table.add_row("median", f"{e_med:.3f} ms", "", f"{t_med:.3f} ms", "", f"{ratio:.4f}")
    console.print(table)

    paired = statistics.median(e["median_ms"] / t["median_ms"] for e, t in rounds)

    def spread(rows: list[dict[str, Any]]) -> float:
        values = [r["median_ms"] for r in rows]
        return (max(values) - min(values)) / statistics.median(values)

    console.print(
        f"[dim]Timer's median is a median of per-block means (block size "
        f"{', '.join(sorted({str(t['block_size']) for t in timer}))}); the engine's is a "
        f"median of single iterations. Round-to-round spread: engine {spread(engine):.1%}, "
        f"Timer {spread(timer):.1%}; median of per-round ratios {paired:.4f}. Load average "
        f"(1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after.[/dim]"
    )
    noisy = max(spread(engine), spread(timer)) > 0.10
    ok = abs(ratio - 1) <= TOLERANCE
    console.print(
        f"[bold {'green' if ok else 'red'}]{'PASS' if ok else 'FAIL'}[/]: engine/Timer = "
        f"{ratio:.4f} ({ratio - 1:+.2%}; tolerance ±{TOLERANCE:.0%})"
        + (" — rounds disagree by >10%: the machine was busy, rerun when quiet" if noisy else "")
    )

    if args.json:
        figures = {
            "torch": torch.__version__,
            "resolution": args.resolution,
            "threads": args.threads,
            "protocol": protocol.model_dump(),
            "timer_min_run_time_s": args.min_time,
            "engine": engine,
            "timer": timer,
            "engine_median_ms": e_med,
            "timer_median_ms": t_med,
            "ratio": ratio,
            "median_paired_ratio": paired,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "noisy": noisy,
            "tolerance": TOLERANCE,
            "pass": ok,
        }
        write_figures(args.json, "agreement", figures, console)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
