"""The page's token generation section: the generate cells' table (frames/generate.py) and,
where some are quantized, their Pareto figure."""

from __future__ import annotations

from typing import Any

from stackcost.report.frames import tidy
from stackcost.report.frames.generate import HEADER as GENERATION_HEADER
from stackcost.report.frames.generate import caption as generation_caption
from stackcost.report.frames.generate import columns, generate_only, generate_rows
from stackcost.report.html import plots
from stackcost.report.html.slots import Figures
from stackcost.report.style import series_colors
from stackcost.store.runs import RunResult


def generation_section(runs: list[RunResult], baseline: str, figs: Figures) -> dict[str, Any]:
    """The token generation section: generate cells have a table of their own (tokens, not
    forward passes) and, where some are quantized, their Pareto figure."""
    rows = [
        {"status": g["cell"].status, "cols": columns(g)} for r in runs for g in generate_rows(r)
    ]
    return {
        "generation": rows,
        "generation_pareto": generation_pareto(runs, baseline, figs) if rows else None,
        "generation_header": GENERATION_HEADER,
        "generation_caption": generation_caption(
            [g["cell"].cell.model for r in runs for g in generate_rows(r)]
        ),
    }


def generation_pareto(runs: list[RunResult], baseline: str, figs: Figures) -> dict | None:
    """A decoder's quantized generate cells: speedup in TPOT p50 over the same rung's fp32
    against the quality lost (held-out perplexity where `stackcost heldout` stored it for
    the same weights, else top-1 disagreement); None without a quantized generate cell."""
    summ = tidy.summary(generate_only(runs), baseline)
    if not tidy.has_quantized(summ):
        return None
    colors = series_colors(tidy.series_order(summ, baseline))
    return figs.add(*plots.pareto_figure(summ, colors))
