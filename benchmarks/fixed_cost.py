"""Fixed cost of one repetition, per backend: what a cell pays before its timed loop.

Each backend runs one real repetition through LocalExecutor (a fresh worker process, as
in `stackcost run`) with a short Protocol, and the phases the worker records are shown:
process spawn and startup, framework import, model build, the eager reference forward
used for verification, the backend's prepare (export, compile), and the cold first call.
"fixed" sums them: the cost of a repetition that does not depend on the stop rule.

Inductor and export-aot compile C++ here, so this one may take several minutes.

    python benchmarks/fixed_cost.py [--backends eager,inductor] [--model resnet18]
        [--resolution 64] [--batch-size 1] [--threads 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.backends import REGISTRY, is_import_path, load_backend
from stackcost.cell import Cell
from stackcost.errors import SpecError
from stackcost.execute.local import LocalExecutor
from stackcost.measure.protocol import Protocol
from stackcost.result import RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.scenarios.task import RepetitionTask
from stackcost.verify import DEFAULT_TOLERANCE

PHASES = ("spawn_s", "import_s", "build_s", "reference_s", "prepare_s")


def blocked(cell: Cell) -> tuple[str, str] | None:
    """(status, reason) when the backend cannot run here, checked without a worker."""
    try:
        backend = load_backend(cell.backend)
    except (ImportError, AttributeError, KeyError, TypeError) as exc:
        return "unavailable", f"cannot load backend: {exc}"
    availability = backend.available()
    if not availability.ok:
        return "unavailable", availability.reason
    problem = backend.capabilities.why_not(cell)
    return ("unsupported", problem) if problem else None


def row(backend: str, result: RepetitionResult, wall_s: float) -> dict[str, Any]:
    phases = result.phases.model_dump()
    cold_s = (result.cold_start_ms or 0.0) / 1e3
    parts = [phases[p] for p in PHASES]
    fixed = sum(parts) + cold_s if all(p is not None for p in parts) else None
    return {
        "backend": backend,
        "status": result.status,
        "reason": result.reason,
        **phases,
        "cold_start_ms": result.cold_start_ms,
        "fixed_s": fixed,
        "median_ms": result.stats.median_ms if result.stats else None,
        "parent_wall_s": wall_s,  # what the caller waited, spawn to result parsed
    }


def fmt_s(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--backends",
        default=",".join(REGISTRY),
        help=f"comma-separated (default all registered: {','.join(REGISTRY)})",
    )
    ap.add_argument("--model", default="resnet18", help="zoo model (default resnet18)")
    ap.add_argument("--resolution", type=int, default=64, help="input side, px (default 64)")
    ap.add_argument("--batch-size", type=int, default=1, help="default 1")
    ap.add_argument("--threads", type=int, default=2, help="worker threads (default 2)")
    ap.add_argument("--timeout", type=float, default=900.0, help="per repetition, s")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)

    # Piped output would otherwise wrap at 80 columns and mangle the table.
    console = Console(width=None if sys.stdout.isatty() else 132)
    try:
        ref = model_ref(args.model)
    except SpecError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    # Short: the timed loop is not what this benchmark is about, only what precedes it.
    protocol = Protocol(min_time_s=0.2, max_time_s=2.0, warmup_max_time_s=2.0)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in REGISTRY and not is_import_path(b)]
    if unknown:
        console.print(f"[red]unknown backend {unknown[0]!r} (allowed: {', '.join(REGISTRY)})[/red]")
        return 2
    executor = LocalExecutor()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stackcost-fixed-cost-") as tmp:
        for i, name in enumerate(backends):
            cell = Cell(
                model=ref,
                backend=name,
                batch_size=args.batch_size,
                resolution=args.resolution,
                threads=args.threads,
            )
            why = blocked(cell)
            if why is not None:
                rows.append({"backend": name, "status": why[0], "reason": why[1]})
                continue
            task = RepetitionTask(
                cell=cell,
                protocol=protocol,
                tolerance=DEFAULT_TOLERANCE[cell.precision],
                timeout_s=args.timeout,
                workdir=str(Path(tmp) / f"{i}-{name}"),
            )
            with console.status(f"{name}: one repetition in a fresh worker"):
                t0 = time.perf_counter()
                try:
                    result = executor.run(task)
                except Exception as exc:  # the executor itself failed: report, go on
                    text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                    rows.append({"backend": name, "status": "executor error", "reason": text})
                    console.print(f"[red]{name}: executor raised {text}[/red]")
                    continue
                wall = time.perf_counter() - t0
            rows.append(row(name, result, wall))
            console.print(f"[dim]{name}: {result.status} in {wall:.1f} s[/dim]")

    title = (
        f"Fixed cost per repetition: {args.model} b{args.batch_size} r{args.resolution} "
        f"fp32, {args.threads} threads (seconds unless noted)"
    )
    table = Table(title=title)
    for col in (
        "backend",
        "status",
        "spawn",
        "import",
        "build",
        "reference",
        "prepare",
        "cold",
        "fixed",
        "total",
        "median",
    ):
        table.add_column(col, justify="left" if col in ("backend", "status") else "right")
    for r in rows:
        if "total_s" not in r:
            table.add_row(r["backend"], r["status"], *["—"] * 9)
            continue
        cold = r["cold_start_ms"]
        table.add_row(
            r["backend"],
            r["status"],
            *(fmt_s(r[p]) for p in PHASES),
            "—" if cold is None else f"{cold:,.1f} ms",
            fmt_s(r["fixed_s"]),
            fmt_s(r["total_s"]),
            "—" if r["median_ms"] is None else f"{r['median_ms']:.3f} ms",
        )
    console.print(table)
    console.print(
        "[dim]fixed = spawn + import + build + reference + prepare + cold. spawn is the "
        "parent's wall minus the worker's total: interpreter start, the import of stackcost "
        "itself (before the worker's clock starts) and interpreter teardown. total is the "
        "worker's own clock and includes warmup + timed loop.[/dim]"
    )
    for r in rows:
        if r["status"] not in ("ok", "unstable"):
            console.print(f"[red]{r['backend']}: {r['status']}: {r['reason']}[/red]")

    ran = [r for r in rows if r.get("fixed_s") is not None]
    failed = [r["backend"] for r in rows if r["status"] not in ("ok", "unstable")]
    if ran:
        worst = max(ran, key=lambda r: r["fixed_s"])
        best = min(ran, key=lambda r: r["fixed_s"])
        verdict = (
            f"fixed cost per repetition from {best['fixed_s']:.2f} s ({best['backend']}) to "
            f"{worst['fixed_s']:.2f} s ({worst['backend']})"
        )
    else:
        verdict = "no backend produced a result"
    if failed:
        verdict += f"; not ok: {', '.join(failed)}"
    style = "red" if failed or not ran else "green"
    console.print(f"[bold {style}]{'FAIL' if failed or not ran else 'OK'}[/]: {verdict}")

    if args.json:
        figures = {
            "model": ref.model_dump(),
            "resolution": args.resolution,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "protocol": protocol.model_dump(),
            "rows": rows,
        }
        write_figures(args.json, "fixed_cost", figures, console)
    return 1 if failed or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
