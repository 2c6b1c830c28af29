"""The terminal table of a generate run: token latencies, token rates, the KV cache and
the decode's achieved bandwidth, one row per cell. Every number is the median of the
cell's valid repetitions (each its own process); the caption carries the definitions."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from pydantic import ValidationError
from rich.table import Table
from rich.text import Text

from stackcost.cell import ModelRef
from stackcost.report.fit import FitTable
from stackcost.report.marks import cell_reason, status_text
from stackcost.report.table import size_axes, size_heading, size_value
from stackcost.report.units import ms, rate
from stackcost.report.weights import tokens_note, weights_lines
from stackcost.result import GenerationResult
from stackcost.store.runs import CellResult, RunResult
from stackcost.workload import SIZE_AXES

CAPTION = (
    "greedy, seeded, exactly the new tokens per row (EOS ignored); TTFT = prefill + first "
    "token; TPOT = one decode step (a token to every row), p50/p90 over the decode steps; "
    "tokens/s count every row of the batch; decode tokens/s exclude prefill and the first "
    "token; KV = keys and values of every layer at prompt + new tokens, all rows; GB/s = "
    "(weights, but only the batch's rows of an untied input embedding, + KV at the mean "
    "decode context) read per step / TPOT p50; % peak = of the read-only bandwidth measured "
    "at the cell's threads for a working set of the step's bytes (`stackcost peaks`: a step "
    "that fits in the last-level cache is held to the cache's bandwidth, a larger one to "
    "memory's; a cuda cell: its GPU's copy bandwidth); rel err = teacher-forced logits vs eager fp32 "
    "(prefill + 8 decode steps); tokens = greedy tokens equal to eager's over those steps "
    "({tokens}); numbers are medians over valid repetitions"
)


def caption(models: list[ModelRef]) -> str:
    """CAPTION for cells of `models`: what their greedy-token agreement can mean, and
    whose weights each had (report/weights.py)."""
    return "; ".join([CAPTION.format(tokens=tokens_note(models)), *weights_lines(models)])


# What a narrow terminal hides first (report/fit.py): TTFT, TPOT p50 and the decode rate stay.
DROP = ("cold", "tokens", "TPOT p90", "% peak", "rel err", "GB/s", "KV cache", "prefill tok/s")


def generations(c: CellResult) -> list[GenerationResult]:
    return [r.generation for r in c.repetitions if r.valid and r.generation is not None]


def median_of(gens: list[GenerationResult], get: Callable[[GenerationResult], float | None]):
    values = [v for g in gens if (v := get(g)) is not None]
    return statistics.median(values) if values else None


def read_ceiling_gbs(
    result: RunResult, threads: int, nbytes: float, device: str = "cpu"
) -> float | None:
    """The bandwidth a decode step of `nbytes` is held to: on a CPU, the read-only
    bandwidth of a working set that size at the cell's threads (Peaks.read_ceiling_gbs:
    memory's for a step too large for the caches, the cache's for one that fits), or the
    STREAM triad's in a run measured before the read-only peak was kept; a cuda cell's, its
    GPU's device-to-device copy bandwidth (`stackcost peaks --device cuda`)."""
    from stackcost.measure.peaks import Peaks

    peaks = (result.env.get("peaks") or {}).get(str(threads) if device == "cpu" else device)
    if not peaks:
        return None
    if device != "cpu":
        return peaks.get("copy_gbs")
    try:
        ceiling = Peaks.model_validate(peaks).read_ceiling_gbs(nbytes)
    except ValidationError:  # a hand-made or partial record: its numbers as they are
        ceiling = peaks.get("read_gbs")
    return ceiling or peaks.get("stream_gbs")


def generate_rows(result: RunResult) -> list[dict]:
    """One dict per cell: the numbers a table, a README or a figure shows."""
    rows = []
    for c in result.cells():
        if c.cell.mode != "generate" or c.cell.serve is not None:
            continue  # a serve cell's sweep is report/serve_table.py's
        gens = generations(c)

        def med(get: Callable[[GenerationResult], float | None], gens=gens) -> float | None:
            return median_of(gens, get)

        gbs = med(lambda g: g.achieved_gbs)
        step_bytes = med(lambda g: g.bytes_per_step)
        peak = (
            read_ceiling_gbs(result, c.cell.threads, step_bytes, c.cell.device)
            if step_bytes
            else None
        )
        reps = [r for r in c.repetitions if r.verification is not None]
        rows.append(
            {
                "cell": c,
                "ttft_ms": med(lambda g: g.ttft_ms),
                "tpot_p50_ms": med(lambda g: g.tpot_p50_ms),
                "tpot_p90_ms": med(lambda g: g.tpot_p90_ms),
                "prefill_tps": med(lambda g: g.prefill_tokens_per_s),
                "decode_tps": med(lambda g: g.decode_tokens_per_s),
                "kv_bytes": gens[-1].kv_cache_bytes if gens else None,
                "gbs": gbs,
                "ceiling_gbs": peak,
                "peak_pct": 100 * gbs / peak if gbs and peak else None,
                "rel_err": max(r.verification.max_rel_err for r in reps) if reps else None,
                "tokens": med(lambda g: g.token_agreement),
                "cold_ms": med(lambda g: g.cold_ms),
                "timing": gens[-1].timing if gens else "",
            }
        )
    return rows


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
    from stackcost.report.scenarios import scenario_view

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


HEADER = [
    "model", "batch", "prompt (tokens)", "new (tokens)", "backend", "precision", "status",
    "TTFT (ms)", "TPOT p50 (ms)", "TPOT p90 (ms)", "prefill tok/s", "decode tok/s",
    "KV cache (MiB)", "GB/s", "% of peak", "rel err", "greedy tokens = eager",
]  # fmt: skip


def columns(r: dict) -> list[str]:
    """One row of generate_rows as HEADER's plain strings (markdown, HTML)."""
    c = r["cell"]

    def num(value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    kv = r["kv_bytes"] / 2**20 if r["kv_bytes"] is not None else None
    return [
        c.cell.model.name,
        str(c.cell.batch_size),
        str(c.cell.sizes.get("prompt_len", "—")),
        str(c.cell.sizes.get("new_tokens", "—")),
        c.cell.backend + (f" [{c.cell.scenario.label()}]" if c.cell.scenario else ""),
        c.cell.precision,
        c.status if c.status == "ok" else f"{c.status}: {cell_reason(c)}",
        num(r["ttft_ms"], ".1f"),
        num(r["tpot_p50_ms"], ".2f"),
        num(r["tpot_p90_ms"], ".2f"),
        num(r["prefill_tps"], ",.0f"),
        num(r["decode_tps"], ",.1f"),
        num(kv, ".1f"),
        num(r["gbs"], ".1f"),
        num(r["peak_pct"], ".0f"),
        num(r["rel_err"], ".1e"),
        num(r["tokens"], ".0%"),
    ]


def generate_markdown(result: RunResult) -> str:
    """The same numbers as a markdown table, its caption below ('' without generate cells)."""
    from stackcost.report.markdown import md_escape

    rows = generate_rows(result)
    if not rows:
        return ""
    lines = ["| " + " | ".join(HEADER) + " |", "|---|---:|---:|---:|---|---|---|" + "---:|" * 10]
    lines += ["| " + " | ".join(md_escape(v) for v in columns(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n\n" + caption([r["cell"].cell.model for r in rows]) + "\n"
