"""`stackcost compare BASELINE CANDIDATE`: verdicts per cell; exit 1 on a regression (CI gate)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from stackcost.compare.stats import BETWEEN_RUN_SPREAD, DEFAULT_ALPHA, DEFAULT_THRESHOLD
from stackcost.errors import SpecError
from stackcost.outputs import check_output_file

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
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"relative change that counts, for every metric (default {DEFAULT_THRESHOLD})",
    )
    p.add_argument(
        "--threshold-metric",
        action="append",
        default=[],
        metavar="METRIC=REL",
        help=f"per-metric threshold, e.g. latency=0.05 ({', '.join(METRIC_NAMES)})",
    )
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance level")
    p.add_argument(
        "--between-run-spread",
        type=float,
        default=BETWEEN_RUN_SPREAD,
        metavar="REL",
        help="how far identical stored runs drift apart on your machine (measure it with "
        "benchmarks/gate_calibration.py); a timing change within it is noisy "
        f"(default {BETWEEN_RUN_SPREAD})",
    )
    p.add_argument("--markdown", metavar="FILE", help="also write a summary for a PR comment")


def thresholds(default: float, items: list[str]) -> dict[str, float]:
    out = {"default": default}
    for item in items:
        name, _, value = item.partition("=")
        if name not in METRIC_NAMES:
            raise SpecError(
                f"--threshold-metric: unknown metric {name!r} ({', '.join(METRIC_NAMES)})"
            )
        try:
            out[name] = float(value)
        except ValueError:
            raise SpecError(f"--threshold-metric {item!r}: expected METRIC=NUMBER") from None
    if any(v < 0 for v in out.values()):
        raise SpecError("thresholds must be >= 0")
    return out


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.compare.diff import compare_sides, load_side
    from stackcost.compare.render import markdown, stored_runs_line, summary_line, table

    if not 0 < args.alpha < 1:
        raise SpecError(f"--alpha must be in (0, 1), got {args.alpha}")
    limits = thresholds(args.threshold, args.threshold_metric)
    if not 0 <= args.between_run_spread < 10:
        raise SpecError(
            f"--between-run-spread {args.between_run_spread!r} must be a relative change in [0, 10)"
        )
    if args.markdown:  # before the sides are loaded and compared
        inputs = [Path(args.baseline), Path(args.candidate), Path(args.db)]
        check_output_file(Path(args.markdown), "--markdown", inputs)
    cmp = compare_sides(
        load_side(args.baseline, args.db),
        load_side(args.candidate, args.db),
        limits,
        args.alpha,
        args.between_run_spread,
    )
    console.print(table(cmp))
    console.print(summary_line(cmp))
    console.print(stored_runs_line(cmp.spread), highlight=False, markup=False, style="dim")
    for c in cmp.cells:  # one plain line per failing cell: greppable in CI logs
        if c.verdict in ("regressed", "newly failing"):
            console.print(
                f"{c.verdict}: {c.cell.label()}", highlight=False, soft_wrap=True, markup=False
            )
    if args.markdown:
        Path(args.markdown).write_text(markdown(cmp, limits, args.alpha), encoding="utf-8")
        console.print(f"wrote {args.markdown}", markup=False)
    return 1 if cmp.failed else 0
