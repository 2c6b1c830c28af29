"""The terminal table of a generate run (frames/generate.py): token latencies, token rates,
the KV cache and the decode's achieved bandwidth, one row per cell. Every number is the
median of the cell's valid repetitions (each its own process); the caption carries the
definitions."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from stackcost.report.fit import FitTable
from stackcost.report.frames.generate import caption, generate_rows
from stackcost.report.frames.scenarios import scenario_view
from stackcost.report.marks import cell_reason, status_text
from stackcost.report.terminal.run import size_axes, size_heading, size_value
from stackcost.report.units import ms, rate
from stackcost.store.runs import CellResult, RunResult
from stackcost.workload import SIZE_AXES

# What a narrow terminal hides first (report/fit.py): TTFT, TPOT p50 and the decode rate stay.
DROP = ("cold", "tokens", "TPOT p90", "% peak", "rel err", "GB/s", "KV cache", "prefill tok/s")


def _bytes(value: int | None) -> str:
    if value is None:
        return "—"
    if value >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    return f"{value / 2**20:.1f} MiB" if value >= 2**20 else f"{value / 2**10:.0f} KiB"


def _shared(cells: list[CellResult], sizes: list[str]) -> dict[str, str]:
    """The model, precision and size columns of one value over the run, each as the title
    says it ('hf:qwen2', 'fp32', 'prompt len 128 tokens'): a column of one value would
    take a narrow terminal's width from the numbers."""
    axes = {
        "model": (lambda c: c.cell.model.name, "{}"),
        "prec": (lambda c: c.cell.precision, "{}"),
    }
    for a in sizes:
        unit = f" {SIZE_AXES[a].unit}" if a in SIZE_AXES else ""
        axes[size_heading(a)] = (
            lambda c, a=a: size_value(c.cell, a),
            f"{a.replace('_', ' ')} {{}}{unit}",
        )
    shared = {}
    for name, (get, form) in axes.items():
        values = {get(c) for c in cells}
        if len(values) == 1 and (value := values.pop()):
            shared[name] = form.format(value)
    return shared


def generate_table(result: RunResult) -> Table:
    rows = generate_rows(result)
    cells = [r["cell"] for r in rows]
    sizes = size_axes(c.cell for c in cells)
    shared = _shared(cells, sizes)
    # Serving cells (generate under LoadGen) add LoadGen's headline and verdict.
    serving = any(c.cell.scenario is not None for c in cells)
    table = FitTable(
        title=Text(" · ".join([f"run {result.run_id}: generate", *shared.values()])),
        header_style="bold",
        drop=DROP,
        hint=f" or read `stackcost report {result.run_id} --format md`",
    )
    names = [
        "model",
        *(["LoadGen", "verdict"] if serving else []),
        "batch",
        *(size_heading(a) for a in sizes),
        "backend",
        "prec",
        "status",
        "TTFT",
        "TPOT p50",
        "TPOT p90",
        "prefill tok/s",
        "decode tok/s",
        "KV cache",
        "GB/s",
        "% peak",
        "rel err",
        "tokens",
        "cold",
    ]
    names = [n for n in names if n not in shared]
    for name in names:
        text = name in ("model", "backend", "status")
        table.add_column(name, justify="left" if text else "right", no_wrap=text)
    reasons = []
    for r in rows:
        c = r["cell"]
        if c.status != "ok" and (reason := cell_reason(c)):
            reasons.append(f"{c.cell.label()}: {reason}")
        view = scenario_view(c) if serving else None
        row = {
            "model": Text(c.cell.model.name),
            "LoadGen": Text(f"{view.label}: {view.shown()}" if view else "timed"),
            "verdict": Text(view.verdict if view else "—"),
            "batch": str(c.cell.batch_size),
            **{size_heading(a): size_value(c.cell, a) for a in sizes},
            "backend": Text(c.cell.backend),
            "prec": c.cell.precision,
            "status": status_text(c.status),
            "TTFT": ms(r["ttft_ms"]),
            "TPOT p50": ms(r["tpot_p50_ms"]),
            "TPOT p90": ms(r["tpot_p90_ms"]),
            "prefill tok/s": rate(r["prefill_tps"], ""),
            "decode tok/s": rate(r["decode_tps"], ""),
            "KV cache": _bytes(r["kv_bytes"]),
            "GB/s": "—" if r["gbs"] is None else f"{r['gbs']:.1f}",
            "% peak": "—" if r["peak_pct"] is None else f"{r['peak_pct']:.0f}%",
            "rel err": "—" if r["rel_err"] is None else f"{r['rel_err']:.1e}",
            "tokens": "—" if r["tokens"] is None else f"{r['tokens']:.0%}",
            "cold": ms(r["cold_ms"]),
        }
        table.add_row(*(row[n] for n in names))
    timing = sorted({f"{r['cell'].cell.backend}: {r['timing']}" for r in rows if r["timing"]})
    table.caption = Text(
        "\n".join([caption([r["cell"].cell.model for r in rows]), *timing, *reasons])
    )
    return table
