"""`stackcost compare BASELINE CANDIDATE`: verdicts per cell; exit 1 on a regression (CI gate)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from stackcost.clip import shown
from stackcost.compare.stats import BETWEEN_RUN_SPREAD, DEFAULT_ALPHA, DEFAULT_THRESHOLD
from stackcost.errors import SpecError
from stackcost.outputs import check_output_file, write_output
from stackcost.runspec.grammar import parse_float

METRIC_NAMES = ("latency", "throughput", "peak_memory", "cold_start")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs cell by cell; exit 1 when something regressed",
        description="Each side is a run id (in --db), a DB file (its latest run) or a JSON "
        "with per-repetition samples. Exit status: 0 no regression, 1 regression or a cell "
        "that newly fails, 2 bad input.",
    )
    p.add_argument("baseline", metavar="BASELINE")
    p.add_argument("candidate", metavar="CANDIDATE")
    p.add_argument(
        "--db", default="stackcost.db", help="store holding run ids (default ./stackcost.db)"
    )
    p.add_argument(
        "--threshold",
        default=str(DEFAULT_THRESHOLD),
        metavar="REL",
        help="relative change that counts, for every metric, in (0, 1) "
        f"(default {DEFAULT_THRESHOLD})",
    )
    p.add_argument(
        "--threshold-metric",
        action="append",
        default=[],
        metavar="METRIC=REL",
        help=f"per-metric threshold, e.g. latency=0.05 ({', '.join(METRIC_NAMES)})",
    )
    p.add_argument("--alpha", default=str(DEFAULT_ALPHA), help="significance level, in (0, 1)")
    p.add_argument(
        "--between-run-spread",
        default=str(BETWEEN_RUN_SPREAD),
        metavar="REL",
        help="how far identical stored runs drift apart on your machine (measure it with "
        "benchmarks/gate_calibration.py); a timing change within it is noisy "
        f"(default {BETWEEN_RUN_SPREAD})",
    )
    p.add_argument("--markdown", metavar="FILE", help="also write a summary for a PR comment")


def thresholds(default: float | str, items: list[str]) -> dict[str, float]:
    """Relative thresholds, each finite and in (0, 1): NaN would make every significant
    change count, infinity would let nothing fail the gate."""
    out = {"default": parse_float(default, "--threshold", 0.0, 1.0)}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq:
            raise SpecError(
                f"--threshold-metric {shown(item)}: expected METRIC=REL, e.g. latency=0.05"
            )
        if name not in METRIC_NAMES:
            raise SpecError(
                f"--threshold-metric: unknown metric {shown(name)} (allowed: {', '.join(METRIC_NAMES)})"
            )
        out[name] = parse_float(value, f"--threshold-metric {name}", 0.0, 1.0)
    return out


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.compare.diff import compare_sides, load_side
    from stackcost.compare.render import DROP, markdown, stored_runs_line, summary_line, table
    from stackcost.report.fit import fit

    alpha = parse_float(args.alpha, "--alpha", 0.0, 1.0)
    limits = thresholds(args.threshold, args.threshold_metric)
    spread = parse_float(
        args.between_run_spread, "--between-run-spread", 0.0, 10.0, low_closed=True
    )
    if args.markdown:  # before the sides are loaded and compared
        inputs = [Path(args.baseline), Path(args.candidate), Path(args.db)]
        check_output_file(Path(args.markdown), "--markdown", inputs)
    cmp = compare_sides(
        load_side(args.baseline, args.db),
        load_side(args.candidate, args.db),
        limits,
        alpha,
        spread,
    )
    hint = " or read every column with --markdown FILE"
    console.print(fit(table(cmp), console, console.width, DROP, hint))
    console.print(summary_line(cmp))
    console.print(stored_runs_line(cmp.spread), highlight=False, markup=False, style="dim")
    for c in cmp.cells:  # one plain line per failing cell: greppable in CI logs
        if c.verdict in ("regressed", "newly failing"):
            console.print(
                f"{c.verdict}: {c.cell.label()}", highlight=False, soft_wrap=True, markup=False
            )
    if args.markdown:
        write_output(Path(args.markdown), markdown(cmp, limits, alpha), "--markdown")
        console.print(f"wrote {args.markdown}", markup=False)
    return 1 if cmp.failed else 0
