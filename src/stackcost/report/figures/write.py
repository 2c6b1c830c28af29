"""Publication figures with matplotlib, each as PNG (200 dpi) and PDF: every figure the
runs support, one module per scenario's (run, quant, costs, generate).

Figure objects are built directly (no pyplot): nothing touches global backend state, so
this is safe inside a test process or a notebook with its own backend.
"""

from __future__ import annotations

from pathlib import Path

from stackcost.backends import BASELINE
from stackcost.report.figures.costs import cost_figures
from stackcost.report.figures.generate import generate_figures
from stackcost.report.figures.layout import save
from stackcost.report.figures.quant import pareto_figures
from stackcost.report.figures.run import run_figures
from stackcost.report.frames import tidy
from stackcost.report.frames.generate import generate_figures_aside, generate_only
from stackcost.report.style import series_colors
from stackcost.store.runs import RunResult


def write_figures(
    runs: list[RunResult], out_dir: str | Path, baseline: str = BASELINE
) -> list[Path]:
    """Write every figure the data supports; a sweep axis with one value gets no figure."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    generated = [p for stem, fig in generate_figures(runs) for p in save(fig, out, stem, used)]
    # A decoder's quantized generate cells (TPOT p50) against the quality they lost.
    decoding = tidy.summary(generate_only(runs), baseline)
    if tidy.has_quantized(decoding):
        colors = series_colors(tidy.series_order(decoding, baseline))
        generated += pareto_figures(decoding, colors, out, used)
    summ = tidy.summary(generate_figures_aside(runs), baseline)
    if summ.empty:
        return generated
    colors = series_colors(tidy.series_order(summ, baseline))
    paths: list[Path] = generated
    paths += run_figures(summ, colors, baseline, out, used)
    paths += pareto_figures(summ, colors, out, used)
    paths += cost_figures(runs, summ, colors, out, used)
    return paths
