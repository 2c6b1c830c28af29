"""The terminal table that ends `stackcost run`."""

from __future__ import annotations

from rich.table import Table

from stackcost.report.units import mib, ms, rate, sci
from stackcost.runs import CellResult, RunResult

STATUS_STYLE = {"ok": "green", "unstable": "yellow", "unavailable": "dim", "unsupported": "dim"}


def _group_key(c: CellResult) -> tuple:
    """The workload and placement: everything but the backend."""
    return tuple(v for k, v in c.cell.flat().items() if k != "backend")


def speedups(cells: list[CellResult], baseline: str = "eager") -> dict[int, float]:
    """Baseline median / cell median, within each workload group (valid cells only)."""
    base: dict[tuple, float] = {}
    for c in cells:
        stats = c.stats
        if c.cell.backend == baseline and c.valid and stats:
            base[_group_key(c)] = stats.median_ms
    out = {}
    for i, c in enumerate(cells):
        stats = c.stats
        if c.valid and stats and _group_key(c) in base:
            out[i] = base[_group_key(c)] / stats.median_ms
    return out


def _shared(cells: list[CellResult]) -> tuple[list[str], str]:
    """Columns that vary across the run, and a title naming the axes that don't."""
    axes = {
        "model": lambda c: c.cell.model.name,
        "prec": lambda c: c.cell.precision,
        "thr": lambda c: str(c.cell.threads),
        "device": lambda c: c.cell.device,
        "mode": lambda c: c.cell.mode,
    }
    varying, fixed = [], []
    for name, get in axes.items():
        values = sorted({get(c) for c in cells})
        if len(values) > 1:
            varying.append(name)
        elif values:
            fixed.append(values[0] if name != "thr" else f"{values[0]} threads")
    return varying, " · ".join(fixed)


def results_table(result: RunResult, baseline: str = "eager") -> Table:
    cells = result.cells()
    # Runs execute series by series (so pruning can bite); read them workload by workload.
    ladder = {b: i for i, b in enumerate(dict.fromkeys(c.cell.backend for c in cells))}
    cells.sort(key=lambda c: (_group_key(c), ladder[c.cell.backend]))
    speed = speedups(cells, baseline)
    varying, title = _shared(cells)
    table = Table(title=f"run {result.run_id}: {title}", header_style="bold")
    columns = [
        *varying,
        "batch",
        "res",
        "backend",
        "status",
        "median ± CI",
        "throughput",
        f"vs {baseline}",
        "peak RSS (Δ)",
        "first call",
        "startup",
        "rel err",
    ]
    for name in columns:
        table.add_column(
            name, justify="left" if name in ("backend", "status", "model") else "right"
        )
    for i, c in enumerate(cells):
        cell, stats = c.cell, c.stats
        latency = throughput = "—"
        if c.valid and stats:
            latency = f"{ms(stats.median_ms)} ± {stats.ci_half_width_rel:.1%}"
            throughput = rate(cell.batch_size / (stats.median_ms / 1e3), "/s")
        mem, rel_err = c.peak_memory, c.max_rel_err
        style = STATUS_STYLE.get(c.status, "red")
        status = f"[{style}]{c.status}[/]"
        if c.reason and not c.valid:
            status += f"\n[dim]{c.reason[:60]}[/]"
        leaks = [r.leak["bytes_per_iter"] for r in c.repetitions if r.leak and r.leak["leak"]]
        if leaks:  # RSS grew with the iteration count: see measure/leak.py
            status += f"\n[red]leak {max(leaks) / 1024:.1f} KiB/iter[/]"
        extra = {
            "model": cell.model.name,
            "prec": cell.precision,
            "thr": str(cell.threads),
            "device": cell.device,
            "mode": cell.mode,
        }
        table.add_row(
            *(extra[v] for v in varying),
            str(cell.batch_size),
            str(cell.resolution),
            cell.backend,
            status,
            latency,
            throughput,
            f"{speed[i]:.2f}×" if i in speed else "—",
            f"{mib(mem.peak_rss_bytes)} ({mib(mem.peak_over_baseline_bytes)})" if mem else "—",
            ms(c.median_of("cold_start_ms")),
            ms(c.median_of("startup_ms")),
            sci(rel_err),
        )
    table.caption = (
        "median ± half-width of its 95% CI; throughput in samples/s; "
        "peak RSS with growth over the pre-model baseline; first call = cold call (Inductor "
        "compiles here); startup = backend prepare (export, AOT compile) + first call; "
        "rel err = max|out-ref|/max|ref| vs eager fp32"
    )
    return table
