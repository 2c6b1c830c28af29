"""A generate run's numbers, as every view of it reads them (terminal/generate.py,
exports/generate.py, the page and the figures): token latencies, token rates, the KV cache
and the decode's achieved bandwidth, one row per cell. Every number is the median of the
cell's valid repetitions (each its own process); the caption carries the definitions."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

from pydantic import ValidationError

from stackcost.cell import ModelRef
from stackcost.report.frames.weights import tokens_note, weights_lines
from stackcost.report.marks import cell_reason
from stackcost.result import GenerationResult
from stackcost.store.runs import CellResult, RunResult

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
    whose weights each had (frames/weights.py)."""
    return "; ".join([CAPTION.format(tokens=tokens_note(models)), *weights_lines(models)])


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
            continue  # a serve cell's sweep is frames/serve.py's
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


def generate_only(runs: list[RunResult]) -> list[RunResult]:
    """The runs with their generate cells alone: a decoder's quantized cells are drawn
    against the quality lost apart from the timed loop's (their latency is TPOT p50)."""
    return [
        dataclasses.replace(r, records=[x for x in r.records if x[0].mode == "generate"])
        for r in runs
    ]


def generate_figures_aside(runs: list[RunResult]) -> list[RunResult]:
    """The runs without their generate cells, which have the figures above instead of the
    timed loop's latency sweeps."""
    return [
        dataclasses.replace(r, records=[x for x in r.records if x[0].mode != "generate"])
        for r in runs
    ]
