"""The generate study's two figures: TPOT against batch under the bandwidth roofline (decode
reads every weight once per step, so its floor is bytes / the read bandwidth of a working
set that size), and TTFT against prompt length. One pair per model, a line per rung and
precision; numbers are the medians of frames/generate.py's generate_rows."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from matplotlib.figure import Figure

from stackcost.report.frames.generate import generate_rows
from stackcost.store.runs import RunResult


def _label(cell: Any, x: str) -> str:
    """One line per rung, precision and the size the figure does not vary: TPOT against
    batch at each prompt length, TTFT against prompt length at each batch."""
    held = f"prompt {cell.sizes['prompt_len']}" if x == "batch" else f"b{cell.batch_size}"
    return f"{cell.backend} {cell.precision} {held}"


def _series(rows: list[dict], x: str) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """model -> 'backend precision' -> [(x, value)], valid cells only."""
    out: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        c = r["cell"]
        if not c.valid:
            continue
        label = _label(c.cell, x)
        value = r["tpot_p50_ms"] if x == "batch" else r["ttft_ms"]
        at = c.cell.batch_size if x == "batch" else c.cell.sizes["prompt_len"]
        if value is not None:
            out[c.cell.model.name][label].append((at, value))
    return out


def tpot_figure(result: RunResult, model: str) -> Figure | None:
    """TPOT p50 against batch per rung, with the bandwidth floor of each rung's bytes per
    step at the read bandwidth measured for a working set of that size (dashed): below it
    no rung can go."""
    rows = [r for r in generate_rows(result) if r["cell"].cell.model.name == model]
    series = _series(rows, "batch").get(model, {})
    if not series or max(len({b for b, _ in s}) for s in series.values()) < 2:
        return None  # one batch size: nothing to draw against
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for label, points in sorted(series.items()):
        points.sort()
        line = ax.plot(*zip(*points, strict=True), marker="o", label=label)[0]
        floors = sorted(
            (r["cell"].cell.batch_size, r["gbs"] * r["tpot_p50_ms"] / r["ceiling_gbs"])
            for r in rows
            if _label(r["cell"].cell, "batch") == label
            and r["gbs"]
            and r["tpot_p50_ms"]
            and r["ceiling_gbs"]
        )
        if floors:  # bytes per step / peak bandwidth, in ms: bytes/1e9/(GB/s)*1e3
            ax.plot(*zip(*floors, strict=True), linestyle="--", color=line.get_color(), alpha=0.6)
    _finish(ax, "batch (sequences)", "TPOT p50 (ms per decode step)")
    ax.set_title(f"{model}: TPOT vs batch (dashed: read-bandwidth floor)")
    return fig


def ttft_figure(result: RunResult, model: str) -> Figure | None:
    rows = [r for r in generate_rows(result) if r["cell"].cell.model.name == model]
    series = _series(rows, "prompt").get(model, {})
    if not series or max(len({p for p, _ in s}) for s in series.values()) < 2:
        return None
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for label, points in sorted(series.items()):
        points.sort()
        ax.plot(*zip(*points, strict=True), marker="o", label=label)
    ax.set_yscale("log")
    _finish(ax, "prompt length (tokens)", "TTFT (ms, prefill + first token)")
    ax.set_title(f"{model}: TTFT vs prompt length")
    return fig


def _finish(ax: Any, xlabel: str, ylabel: str) -> None:
    """The axes both figures share: log2 sizes, labels, legend, grid."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def generate_figures(runs: list[RunResult]) -> list[tuple[str, Figure]]:
    """(stem, figure) for every model of every run with generate cells."""
    out = []
    for result in runs:
        models = sorted({c.cell.model.name for c in result.cells() if c.cell.mode == "generate"})
        for model in models:
            for stem, make in (("tpot_vs_batch", tpot_figure), ("ttft_vs_prompt", ttft_figure)):
                fig = make(result, model)
                if fig is not None:
                    out.append((f"{stem}-{model}", fig))
    return out
