"""`stackcost peaks`: the machine's measured ceilings that "% of peak" divides by.

`--device cpu` (the default): GEMM and bandwidth per thread count. `--device cuda`: the
GPU's matmul peak per precision (fp32 with TF32 off, tf32, bf16, fp16) and its copy
bandwidth, timed with CUDA events (stackcost.measure.gpu_peaks)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

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
    from stackcost.env import collect, fingerprint
    from stackcost.errors import SpecError
    from stackcost.measure.peaks import cached_peaks, measure_peaks, store_peaks
    from stackcost.runspec.grammar import parse_positive_ints
    from stackcost.runspec.run import check_threads

    if args.device not in DEVICES:
        raise SpecError(f"device {args.device!r} is not one of {', '.join(DEVICES)}")
    if args.device == "cuda":
        return run_cuda(args, console)
    if args.threads is not None:
        threads = sorted(set(parse_positive_ints(args.threads, "threads")))
        check_threads(threads)  # more than the machine's measures the scheduler, or fails
    else:
        threads = sorted({1, len(os.sched_getaffinity(0))})
    env_fp = fingerprint(collect())
    rows = []
    for t in threads:
        peaks = None if args.remeasure else cached_peaks(env_fp, t, args.cache_dir, args.quick)
        source = "cache"
        if peaks is None:
            with console.status(Text(f"measuring peaks at {t} thread(s)…")):
                peaks = measure_peaks(t, quick=args.quick)
            source = (
                "measured now, cached"
                if store_peaks(env_fp, peaks, args.cache_dir)
                else (
                    "measured now, NOT cached: the machine was busy"
                    if peaks.busy
                    else "measured now, not cached (cache not writable)"
                )
            )
        rows.append((peaks, source))
    if args.json:
        print(json.dumps({str(p.threads): p.model_dump(mode="json") for p, _ in rows}, indent=2))
        return 0
    title = Text(f"measured peaks (environment {env_fp})")
    table = FitTable(title=title, drop=("measured", "others' CPU", "bf16 GEMM", "read"))
    columns = ("threads", "fp32 GEMM", "bf16 GEMM", "triad", "read", "others' CPU", "measured")
    for col in (*columns, "source"):
        table.add_column(col, justify="right" if col != "source" else "left")
    for p, source in rows:
        others = "—" if p.other_busy_cores is None else f"{p.other_busy_cores:.2f} cores"
        table.add_row(
            str(p.threads),
            f"{p.fp32_gflops:,.0f} GFLOP/s",
            "—" if p.bf16_gflops is None else f"{p.bf16_gflops:,.0f} GFLOP/s",
            f"{p.stream_gbs:.1f} GB/s",
            "—" if p.read_gbs is None else f"{p.read_gbs:.1f} GB/s",
            Text(others, style="red" if p.busy else ""),
            Text(p.measured_at),
            Text(source),
        )
    console.print(table)
    curves = {p.threads: dict(p.read_by_size) for p, _ in rows if p.read_by_size}
    if curves:  # what a decode step of each size is held to (generate's % peak)
        by_size = Table()
        by_size.add_column("read: working set", justify="right")
        for threads in curves:
            by_size.add_column(f"{threads} thread(s), GB/s", justify="right")
        for b in sorted({b for curve in curves.values() for b in curve}):
            gbs = [curve.get(b) for curve in curves.values()]
            by_size.add_row(
                f"{b / 2**20:,.0f} MiB", *("—" if g is None else f"{g:.1f}" for g in gbs)
            )
        console.print(by_size)
    if rows:
        first = rows[0][0]
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


def run_cuda(args: argparse.Namespace, console: Console) -> int:
    """The GPU's peaks: from the cache, or measured now in this process with CUDA events."""
    from stackcost.env import collect, fingerprint
    from stackcost.errors import SpecError
    from stackcost.measure.gpu_peaks import GPU_PRECISIONS, cuda_unavailable_reason
    from stackcost.measure.gpu_peaks import measure_gpu_peaks as measure
    from stackcost.measure.peaks import cached_gpu_peaks, gpu_key, store_gpu_peaks

    if args.threads is not None:
        raise SpecError("--threads applies to --device cpu only (a GPU's peaks have no threads)")
    reason = cuda_unavailable_reason("cuda")
    if reason:
        raise SpecError(f"device 'cuda' is not available here: {reason}; use --device cpu")
    env = collect()
    env_fp, key = fingerprint(env), gpu_key(env)
    peaks = None if args.remeasure else cached_gpu_peaks(env_fp, key, args.cache_dir, args.quick)
    source = "cache"
    if peaks is None:
        with console.status(Text("measuring the GPU's peaks (CUDA events)…")):
            peaks = measure("cuda", quick=args.quick)
        source = (
            "measured now, cached"
            if store_gpu_peaks(env_fp, key, peaks, args.cache_dir)
            else (
                "measured now, NOT cached: another process used the GPU"
                if peaks.busy
                else "measured now, not cached (cache not writable)"
            )
        )
    if args.json:
        print(json.dumps({"cuda": peaks.model_dump(mode="json")}, indent=2))
        return 0
    title = Text(f"measured GPU peaks (environment {env_fp})")
    table = FitTable(title=title, drop=("measured", "other processes"))
    columns = ("GPU", *(f"{p} matmul" for p in GPU_PRECISIONS), "copy", "other processes")
    for col in (*columns, "measured", "source"):
        table.add_column(col, justify="left" if col in ("GPU", "source") else "right")
    others = "—" if peaks.other_processes is None else str(peaks.other_processes)
    table.add_row(
        Text(f"{peaks.name} ({peaks.device})"),
        *(f"{getattr(peaks, f'{p}_gflops') / 1e3:,.1f} TFLOP/s" for p in GPU_PRECISIONS),
        f"{peaks.copy_gbs:,.0f} GB/s",
        Text(others, style="red" if peaks.busy else ""),
        Text(peaks.measured_at),
        Text(source),
    )
    console.print(table)
    console.print(Text(f"matmul: {peaks.gemm_method}. Copy: {peaks.copy_method}.", style="dim"))
    return 0
