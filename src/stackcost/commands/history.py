"""`stackcost history`: a metric over stored runs, with the change points where it stepped."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from stackcost.clip import shown
from stackcost.errors import SpecError
from stackcost.outputs import check_output_file, write_output, writing
from stackcost.report.fit import FitTable
from stackcost.runspec.grammar import parse_float


def add_parser(sub: Any) -> None:
    p = sub.add_parser("history", help="a metric over runs, with detected regressions")
    p.add_argument(
        "--metric",
        default="latency",
        choices=["latency", "throughput", "peak_memory", "cold_start"],
    )
    p.add_argument("--model", help="only cells of this model")
    p.add_argument("--backend", help="only cells of this backend")
    p.add_argument("--batch-size", type=int, help="only cells of this batch size")
    p.add_argument("--db", default="stackcost.db", help="SQLite store (default ./stackcost.db)")
    p.add_argument(
        "--label", default="commit", help="x labels: commit (default), run, or version:PKG"
    )
    p.add_argument(
        "--alpha", default="0.01", help="step significance (Bonferroni), in (0, 1) (default 0.01)"
    )
    p.add_argument(
        "--min-change",
        default="0.02",
        metavar="REL",
        help="ignore smaller relative steps, in [0, 10) (default 0.02)",
    )
    p.add_argument("-o", "--output", help="write a self-contained HTML page")
    p.add_argument("--figure", help="write the plot as an image (PNG, PDF, SVG)")


def check_figure_format(path: Path) -> None:
    """matplotlib picks the format by the suffix: an unknown one fails only after the plot."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in formats:
        raise SpecError(
            f"--figure {shown(str(path))}: name an image format by its suffix "
            f"(allowed: {', '.join(sorted(formats))})"
        )


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.compare.history import figure, html, load_history, untrusted_summary

    alpha = parse_float(args.alpha, "--alpha", 0.0, 1.0)
    min_change = parse_float(args.min_change, "--min-change", 0.0, 10.0, low_closed=True)
    if not Path(args.db).is_file():
        raise SpecError(f"no database at {shown(args.db)}")
    if not (args.label in ("commit", "run") or args.label.startswith("version:")):
        raise SpecError(f"--label must be commit, run or version:PKG, got {shown(args.label)}")
    for flag, output in (("-o", args.output), ("--figure", args.figure)):
        if output:  # before the store is read: a bad output costs nothing
            check_output_file(Path(output), flag, inputs=[Path(args.db)])
    if args.figure:
        check_figure_format(Path(args.figure))

    def where(cell: Any) -> bool:
        return (
            (args.model is None or cell.model.name == args.model)
            and (args.backend is None or cell.backend == args.backend)
            and (args.batch_size is None or cell.batch_size == args.batch_size)
        )

    series = load_history(
        args.db, args.metric, where, args.label, alpha=alpha, min_change=min_change
    )
    if not series:
        raise SpecError(f"no valid cells in {args.db!r} match the filters")
    title = f"{args.metric}: change points"
    t = FitTable(title=title, title_justify="left", drop=("runs", "starts at"))
    for col in ("cell", "runs", "starts at", "run", "level", "change", "kind"):
        t.add_column(col, justify="right" if col in ("runs", "level", "change") else "left")
    for s in series:
        for st in s.steps:
            p = s.points[st.index]
            kind = "[red]regression[/]" if st in s.regressions else "[green]improvement[/]"
            level = f"{st.before:.4g} → {st.after:.4g}"
            t.add_row(
                escape(s.cell.label()),
                str(len(s.points)),
                escape(p.label),
                escape(p.run_id),
                level,
                f"{st.change:+.1%}",
                kind,
            )
    if t.row_count:
        console.print(t)
    else:
        console.print(f"no change points in {len(series)} series", markup=False)
    for line in untrusted_summary(series):  # unstable / disturbed points, marked
        console.print(line, markup=False, style="yellow")
    if args.output:
        write_output(Path(args.output), html(series, args.metric), "-o")
        console.print(f"wrote {args.output}", markup=False)
    if args.figure:
        with writing(f"--figure {shown(args.figure)}"):
            figure(series, args.metric, Path(args.figure))
        console.print(f"wrote {args.figure}", markup=False)
    return 0
