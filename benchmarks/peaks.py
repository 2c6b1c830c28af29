"""The machine's measured peaks: the ceilings the roofline compares each cell against.

Measures, in this process and without the cache, the best square fp32 GEMM (torch.mm,
2048x2048), the bf16 GEMM where the CPU has bf16 instructions, and a STREAM-like triad
over 256 MiB float32 arrays, at each thread count. Shows how each scales with threads:
GEMM should scale with cores; bandwidth saturates once a few cores share the memory bus.

    python benchmarks/peaks.py [--threads 1,2] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.measure.peaks import Peaks, measure_peaks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (1,2)")
    ap.add_argument("--quick", action="store_true", help="small sizes (GEMM 512, 16 MiB arrays)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]

    # Piped output would otherwise wrap at 80 columns and mangle the table.
    console = Console(width=None if sys.stdout.isatty() else 132)
    results: list[Peaks] = []
    for t in threads:
        with console.status(f"measuring peaks at {t} thread(s)"):
            results.append(measure_peaks(t, quick=args.quick))

    table = Table(title="Measured peaks (best run)" + (" — quick sizes" if args.quick else ""))
    for col in ("threads", "fp32 GFLOP/s", "bf16 GFLOP/s", "triad GB/s", "FLOP/byte", "took"):
        table.add_column(col, justify="right")
    for p in results:
        table.add_row(
            str(p.threads),
            f"{p.fp32_gflops:,.1f}",
            "—" if p.bf16_gflops is None else f"{p.bf16_gflops:,.1f}",
            f"{p.stream_gbs:,.1f}",
            # The ridge point: kernels below this intensity are bandwidth-bound at fp32.
            f"{p.fp32_gflops / p.stream_gbs:,.1f}",
            f"{p.seconds:.2f} s",
        )
    console.print(table)
    first = results[0]
    console.print(f"[dim]GEMM: {first.gemm_method}[/dim]")
    console.print(f"[dim]bandwidth: {first.stream_method}[/dim]")
    console.print(f"[dim]bf16: {first.bf16_note}[/dim]")
    console.print("[dim]FLOP/byte = fp32 peak / triad bandwidth: the roofline's ridge.[/dim]")
    if len(results) > 1:
        base, last = results[0], results[-1]
        scale = last.threads / base.threads
        console.print(
            f"{base.threads} → {last.threads} threads: fp32 GEMM x"
            f"{last.fp32_gflops / base.fp32_gflops:.2f}, triad x"
            f"{last.stream_gbs / base.stream_gbs:.2f} (linear would be x{scale:g})"
        )

    ok = all(p.fp32_gflops > 0 and p.stream_gbs > 0 for p in results)
    console.print(
        f"[bold {'green' if ok else 'red'}]{'OK' if ok else 'FAIL'}[/]: peaks measured at "
        f"{', '.join(str(p.threads) for p in results)} thread(s) in "
        f"{sum(p.seconds for p in results):.1f} s"
    )
    if args.json:
        figures = {"quick": args.quick, "peaks": [p.model_dump() for p in results]}
        write_figures(args.json, "peaks", figures, console)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
