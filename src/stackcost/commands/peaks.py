"""`stackcost peaks`: the machine's measured ceilings that "% of peak" divides by.

`--device cpu` (the default): GEMM and bandwidth per thread count. `--device cuda`: the
GPU's matmul peak per precision (fp32 with TF32 off, tf32, bf16, fp16) and its copy
bandwidth, timed with CUDA events (stackcost.measure.gpu_peaks)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from stackcost.api import machine
from stackcost.api.machine import GpuPeaks, MachinePeaks, Peaks, PeaksSource
from stackcost.errors import SpecError
from stackcost.report.fit import FitTable

DEVICES = ("cpu", "cuda")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "peaks",
        help="show (or measure) this machine's GEMM and memory-bandwidth peaks per thread count "
        "(--device cuda: the GPU's matmul peak per precision and its copy bandwidth)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help=f"{' or '.join(DEVICES)} (default cpu); cuda needs an NVIDIA GPU and a CUDA torch",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes: seconds, not a ceiling (a smoke test; a full request measures again)",
    )
    p.add_argument(
        "--threads",
        help="thread counts, e.g. 1,2 or 1..16x2 (default: 1 and every usable CPU)",
    )
    p.add_argument(
        "--remeasure",
        action="store_true",
        help="measure now and replace the cached peaks (e.g. after a busy first measurement)",
    )
    p.add_argument("--json", action="store_true", help="print the peaks as JSON")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="peaks cache directory (default: ~/.cache/stackcost/peaks, the one runs use)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.runspec.grammar import parse_positive_ints

    if args.device not in DEVICES:
        raise SpecError(f"device {args.device!r} is not one of {', '.join(DEVICES)}")
    if args.device == "cuda":
        return run_cuda(args, console)
    threads = None
    if args.threads is not None:
        threads = parse_positive_ints(args.threads, "threads")
    found = machine.cpu_peaks(
        threads,
        quick=args.quick,
        remeasure=args.remeasure,
        cache_dir=args.cache_dir,
        measuring=lambda message: console.status(Text(message)),
    )
    if args.json:
        rows = {str(r.peaks.threads): r.peaks.model_dump(mode="json") for r in found.readings}
        print(json.dumps(rows, indent=2))
        return 0
    console.print(cpu_table(found))
    by_size = read_curve_table([r.peaks for r in found.readings])
    if by_size is not None:
        console.print(by_size)
    if found.readings:
        first = found.readings[0].peaks
        # The methods name libraries and flags: printed as text, never as markup.
        console.print(
            Text(
                f"GEMM: {first.gemm_method}. Triad: {first.stream_method}. Read: "
                f"{first.read_method or 'not measured'}. bf16: "
                f"{first.bf16_note}.",
                style="dim",
            )
        )
    return 0


def cpu_table(found: MachinePeaks[Peaks]) -> FitTable:
    """One row per thread count: the GEMM and bandwidth ceilings, and where they came from."""
    title = Text(f"measured peaks (environment {found.environment})")
    table = FitTable(title=title, drop=("measured", "others' CPU", "bf16 GEMM", "read"))
    columns = ("threads", "fp32 GEMM", "bf16 GEMM", "triad", "read", "others' CPU", "measured")
    for col in (*columns, "source"):
        table.add_column(col, justify="right" if col != "source" else "left")
    for reading in found.readings:
        p = reading.peaks
        others = "—" if p.other_busy_cores is None else f"{p.other_busy_cores:.2f} cores"
        table.add_row(
            str(p.threads),
            f"{p.fp32_gflops:,.0f} GFLOP/s",
            "—" if p.bf16_gflops is None else f"{p.bf16_gflops:,.0f} GFLOP/s",
            f"{p.stream_gbs:.1f} GB/s",
            "—" if p.read_gbs is None else f"{p.read_gbs:.1f} GB/s",
            Text(others, style="red" if p.busy else ""),
            Text(p.measured_at),
            Text(source_text(reading.source, "the machine was busy")),
        )
    return table


def read_curve_table(peaks: list[Peaks]) -> Table | None:
    """Read bandwidth by working set, one column per thread count: what a decode step of
    each size is held to (generate's % peak). None when no reading has the curve."""
    curves = {p.threads: dict(p.read_by_size) for p in peaks if p.read_by_size}
    if not curves:
        return None
    by_size = Table()
    by_size.add_column("read: working set", justify="right")
    for threads in curves:
        by_size.add_column(f"{threads} thread(s), GB/s", justify="right")
    for b in sorted({b for curve in curves.values() for b in curve}):
        gbs = [curve.get(b) for curve in curves.values()]
        by_size.add_row(f"{b / 2**20:,.0f} MiB", *("—" if g is None else f"{g:.1f}" for g in gbs))
    return by_size


def source_text(source: PeaksSource, busy: str) -> str:
    """Where a reading came from, as the table's source column says it; `busy` says what
    kept a fresh measurement out of the cache."""
    return {
        "cache": "cache",
        "measured": "measured now, cached",
        "busy": f"measured now, NOT cached: {busy}",
        "unwritable": "measured now, not cached (cache not writable)",
    }[source]


def run_cuda(args: argparse.Namespace, console: Console) -> int:
    """The GPU's peaks: from the cache, or measured now in this process with CUDA events."""
    if args.threads is not None:
        raise SpecError("--threads applies to --device cpu only (a GPU's peaks have no threads)")
    found = machine.gpu_peaks(
        quick=args.quick,
        remeasure=args.remeasure,
        cache_dir=args.cache_dir,
        measuring=lambda message: console.status(Text(message)),
    )
    (reading,) = found.readings
    if args.json:
        print(json.dumps({"cuda": reading.peaks.model_dump(mode="json")}, indent=2))
        return 0
    console.print(gpu_table(found.environment, reading.peaks, reading.source))
    console.print(
        Text(
            f"matmul: {reading.peaks.gemm_method}. Copy: {reading.peaks.copy_method}.", style="dim"
        )
    )
    return 0


def gpu_table(environment: str, peaks: GpuPeaks, source: PeaksSource) -> FitTable:
    """The GPU's row: its matmul peak per precision, its copy bandwidth, where they came from."""
    title = Text(f"measured GPU peaks (environment {environment})")
    table = FitTable(title=title, drop=("measured", "other processes"))
    precisions = machine.GPU_PRECISIONS
    columns = ("GPU", *(f"{p} matmul" for p in precisions), "copy", "other processes")
    for col in (*columns, "measured", "source"):
        table.add_column(col, justify="left" if col in ("GPU", "source") else "right")
    others = "—" if peaks.other_processes is None else str(peaks.other_processes)
    table.add_row(
        Text(f"{peaks.name} ({peaks.device})"),
        *(f"{getattr(peaks, f'{p}_gflops') / 1e3:,.1f} TFLOP/s" for p in precisions),
        f"{peaks.copy_gbs:,.0f} GB/s",
        Text(others, style="red" if peaks.busy else ""),
        Text(peaks.measured_at),
        Text(source_text(source, "another process used the GPU")),
    )
    return table
