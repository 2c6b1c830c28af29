"""The machine's measured peaks: the ceilings the roofline compares each cell against.

Measures, in this process and without the cache, the best square fp32 GEMM (torch.mm,
2048x2048), the bf16 GEMM where the CPU has bf16 instructions, and a STREAM-like triad
over 256 MiB float32 arrays, at each thread count. Shows how each scales with threads:
GEMM should scale with cores; bandwidth saturates once a few cores share the memory bus.

--device cuda measures the GPU instead (stackcost.measure.gpu_peaks): torch.mm of 8192^2
matrices in fp32 (TF32 off), tf32, bf16 and fp16, and a 1 GiB device-to-device copy, each
call timed by CUDA events, median of the calls. Refused (exit 2) where CUDA is absent.

    python benchmarks/peaks.py [--device cpu|cuda] [--threads 1,2] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.measure.peaks import Peaks, measure_peaks


def gpu_main(args: argparse.Namespace, console: Console) -> int:
    from stackcost.measure.gpu_peaks import GPU_PRECISIONS, cuda_unavailable_reason
    from stackcost.measure.gpu_peaks import measure_gpu_peaks as measure

    reason = cuda_unavailable_reason("cuda")
    if reason:
        print(f"peaks.py: error: --device cuda: {reason}; use --device cpu", file=sys.stderr)
        return 2
    with console.status("measuring the GPU's peaks"):
        p = measure("cuda", quick=args.quick)
    table = Table(title=f"{p.name}: measured peaks (median)" + (" — quick" if args.quick else ""))
    for col in (*(f"{x} TFLOP/s" for x in GPU_PRECISIONS), "copy GB/s", "took"):
        table.add_column(col, justify="right")
    table.add_row(
        *(f"{getattr(p, f'{x}_gflops') / 1e3:,.1f}" for x in GPU_PRECISIONS),
        f"{p.copy_gbs:,.0f}",
        f"{p.seconds:.2f} s",
    )
    console.print(table)
    console.print(f"[dim]matmul: {p.gemm_method}[/dim]", highlight=False)
    console.print(f"[dim]copy: {p.copy_method}[/dim]", highlight=False)
    best = ", ".join(f"{k} {v / 1e3:,.1f}" for k, v in p.best_gflops.items())
    console.print(f"[dim]best single call, TFLOP/s: {best}[/dim]", highlight=False)
    ok = all(getattr(p, f"{x}_gflops") > 0 for x in GPU_PRECISIONS) and p.copy_gbs > 0
    console.print(f"[bold {'green' if ok else 'red'}]{'OK' if ok else 'FAIL'}[/]: GPU peaks "
                  f"measured in {p.seconds:.1f} s")  # fmt: skip
    if args.json:
        figures = {"device": "cuda", "quick": args.quick, "gpu_peaks": p.model_dump()}
        write_figures(args.json, "peaks", figures, console)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (1,2)")
    ap.add_argument("--quick", action="store_true", help="small sizes (GEMM 512, 16 MiB arrays)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]

    # Piped output would otherwise wrap at 80 columns and mangle the table.
    console = Console(width=None if sys.stdout.isatty() else 132)
    if args.device not in ("cpu", "cuda"):
        ap.error(f"--device {args.device!r}: use cpu or cuda")
    if args.device == "cuda":
        return gpu_main(args, console)
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
