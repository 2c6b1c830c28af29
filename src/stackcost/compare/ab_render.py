"""An interleaved A/B as a terminal table, as markdown for a pull request, and as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from rich.table import Table
from rich.text import Text

from stackcost.backends import omp_bindable
from stackcost.cell import GENERATE
from stackcost.execute.interleave import ABResult, CellPair, burst_shape
from stackcost.execute.sides import Side
from stackcost.measure.paired import look_points

STYLE = {
    "regressed": "red",
    "newly failing": "red",
    "improved": "green",
    "fixed": "green",
    "noisy": "yellow",
    "failing": "magenta",
}
ICON = {"regressed": "🔴", "newly failing": "❌", "improved": "🟢", "fixed": "✅", "noisy": "🟡"}
# What a narrow terminal hides first (report/fit.py, applied where the table is printed).
DROP = ("design", "blocks", "base (ms)", "cand (ms)")
NUMBERS = ("base (ms)", "cand (ms)", "change [interval]", "blocks")


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def _ratio(c: CellPair) -> str:
    r = c.result
    if r is None or not c.blocks:
        return "—"
    return f"{r.change:+.1%} [{r.ci_low - 1:+.1%}, {r.ci_high - 1:+.1%}]"


def sides_lines(sides: Mapping[str, Side]) -> list[str]:
    """Who is on each side, and whether this is an A/A test."""
    lines = [f"{name}: {side.describe()}" for name, side in sides.items()]
    if sides["base"].same_as(sides["cand"]):
        lines.append(
            "A/A test: both sides are the same environment, so any `regressed` or `improved` "
            "here is a false alarm (what the gate's error budget allows)."
        )
    return lines


def _in_bursts(ab: ABResult, what: str, applies: Callable[[CellPair], bool]) -> str:
    """ ", {what}" where it applied to every burst cell, naming the cells where it applied
    to some; "" where to none."""
    bursts = [c for c in ab.cells if c.design == "bursts"]
    labels = [c.label for c in bursts if applies(c)]
    if not labels:
        return ""
    return f", {what}" + ("" if len(labels) == len(bursts) else f" in {', '.join(labels)}")


def _bound(ab: ABResult) -> str:
    """Which burst cells had their threads bound: only those on torch's OpenMP pool
    (omp_bindable), so an ONNX Runtime or 1-thread cell is never said to be."""
    return _in_bursts(
        ab, "torch's OpenMP threads bound one per core", lambda c: omp_bindable(c.cand)
    )


def _pinned(ab: ABResult) -> str:
    """Which burst cells ran both workers on the same drawn cores (same_cores): those
    narrower than the machine, whose blocks recorded their cores."""
    return _in_bursts(
        ab,
        "both on the same core(s), drawn per block",
        lambda c: any(b.get("cores") for b in c.burst_blocks),
    )


def design_line(ab: ABResult) -> str:
    d = ab.design
    looks = look_points(d.min_blocks, d.max_blocks)
    processes = (
        f"blocks of 4 repetitions, ABBA/BAAB at random (seed {d.seed}), each repetition its "
        "own process"
    )
    bound = (_bound(ab) if d.bind_threads else "") + _pinned(ab)
    generating = any(c.design == "bursts" and c.base.mode == GENERATE for c in ab.cells)
    least = burst_shape(GENERATE).min_pairs
    unit = (
        f" (in a generate cell: whole generations, at least one, and {least}+ pairs a block)"
        if generating
        else ""
    )
    bursts = (
        f"one fresh warm worker a side per block{bound}, bursts of {d.burst_ms:g} ms{unit} "
        f"alternated in random order for {d.block_s:g} s (seed {d.seed})"
    )
    if d.pacing != "bursts":
        how = processes
    elif all(c.design == "bursts" for c in ab.cells):
        how = bursts
    else:
        how = f"{bursts}; cells whose design is processes: {processes}"
    return (
        f"{ab.blocks} block(s): {how}; workers on the {d.allocator} allocator; a cell regresses when the ratio's interval lies above "
        f"1 and the change is beyond ±{d.threshold:.0%}; looks at {', '.join(map(str, looks))} "
        f"blocks share α = {d.alpha:g} (Bonferroni: {1 - d.alpha / len(looks):.2%} intervals)"
    )


def table(ab: ABResult) -> Table:
    t = Table(
        title=f"A/B pair {ab.pair_id}: base {ab.run_ids['base']} vs cand {ab.run_ids['cand']}",
        title_justify="left",
        caption=design_line(ab),
        caption_justify="left",
    )
    columns = ("cell", "verdict", "base (ms)", "cand (ms)", "change [interval]", "blocks")
    for col in (*columns, "spread in/between", "design", "note"):
        # Text: "[interval]" is a heading, not markup.
        t.add_column(Text(col), justify="right" if col in NUMBERS else "left")
    for c in ab.cells:
        t.add_row(
            Text(c.label),
            Text(c.verdict, style=STYLE.get(c.verdict, "")),
            _ms(c.median_ms("base")),
            _ms(c.median_ms("cand")),
            _ratio(c),
            str(len(c.blocks)),
            _spread(c),
            c.design,
            Text(c.note()),
        )
    return t


def _spread(c: CellPair) -> str:
    """Where the cell's noise is, '0.8% / 6.1% !': in bursts, the ratio's, within a block's
    burst pairs and between blocks (measure.paired.paired_spreads); in processes, the base
    side's repetitions (nothing within). '!' where the blocks' processes carry more of their
    own than the rest explains: only more blocks average that."""
    return (c.pair_spreads() or c.spreads("base")).shown()


def _counts(ab: ABResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in ab.cells:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    return counts


def counts_line(ab: ABResult) -> str:
    return ", ".join(f"{n} {v}" for v, n in _counts(ab).items()) or "no cells"


def summary_line(ab: ABResult) -> str:
    """The headline first (an undecided gate never reads as a pass), then every verdict,
    unless the headline already named them all ("undecided: 2 cells noisy")."""
    if all(verdict in ab.headline for verdict in _counts(ab)):
        return ab.headline
    return f"{ab.headline} ({counts_line(ab)})"


UNDECIDED_ADVICE = (
    "A `noisy` cell's interval still straddles the threshold at the block cap: this run "
    "neither passes nor fails it, though ab already replanned its blocks at the first look "
    "(its note says how). Its spread says where the noise is: between blocks (marked !, "
    "each fresh process pair's own, where it landed in memory), which more `--max-blocks` "
    "average; or within a block's burst pairs, which a longer `--block-time` averages. Or "
    "let the job choose with `--on-undecided pass|fail`."
)
# The markdown's first words, by the gate's outcome.
HEAD = {
    "regressed": "❌ **Performance regression**",
    "undecided": "🟡 **{headline}, not a pass**",
    "passed": "✅ **No performance regression**",
}


def markdown(ab: ABResult) -> str:
    head = HEAD[ab.outcome].format(headline=ab.headline.capitalize())
    lines = [
        f"{head} (interleaved A/B): {counts_line(ab)}",
        "",
        *[f"- {line}" for line in sides_lines(ab.sides)],
        "",
        design_line(ab) + ".",
        "",
        *([UNDECIDED_ADVICE, ""] if ab.outcome == "undecided" else []),
        "| | cell | verdict | base (ms) | cand (ms) | change [interval] | blocks |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for c in ab.cells:
        verdict = c.verdict + (f" ({c.note()})" if c.note() else "")
        lines.append(
            f"| {ICON.get(c.verdict, '')} | `{c.label}` | {verdict.replace('|', '/')} | "
            f"{_ms(c.median_ms('base'))} | {_ms(c.median_ms('cand'))} | {_ratio(c)} | "
            f"{len(c.blocks)} |"
        )
    return "\n".join(lines) + "\n"


def as_json(ab: ABResult) -> str:
    return json.dumps(ab.as_dict(), indent=2, default=str)


__all__ = [
    "DROP",
    "HEAD",
    "as_json",
    "counts_line",
    "design_line",
    "markdown",
    "sides_lines",
    "summary_line",
    "table",
]
