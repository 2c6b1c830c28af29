"""`stackcost report [RUN ...]`: the HTML report, exports and publication figures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from stackcost.api.catalog import BASELINE, check_backend
from stackcost.clip import shown
from stackcost.errors import SpecError
from stackcost.outputs import check_output_dir, check_output_file, write_output, writing


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="HTML report, md/csv/json export or figures of stored runs")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run ids (default: the latest run)")
    p.add_argument("--db", default="stackcost.db", help="SQLite store (default ./stackcost.db)")
    p.add_argument(
        "-o", "--output", help="output file (default report.html, or stdout for --format)"
    )
    p.add_argument(
        "--format",
        choices=["html", "md", "csv", "json", "run-json"],
        default="html",
        help="run-json: one run with every repetition and sample, for `stackcost compare`",
    )
    p.add_argument("--baseline", default=BASELINE, help="backend the ratios are taken to")
    p.add_argument("--figures", metavar="DIR", help="also write matplotlib figures (PNG, PDF)")
    p.add_argument("--all", action="store_true", help="every run in the store (e.g. a merged one)")
    p.add_argument(
        "--reference",
        metavar="MACHINE",
        help="the machine (or thread count, device) column the study tables' asterisks "
        "compare with; part of its name is enough (default: the first column)",
    )
    p.add_argument(
        "--advice",
        metavar="ID",
        help="show a stored `stackcost advise` answer first (its id, or latest), and, "
        "without RUN ids, the runs it measured",
    )
    p.add_argument(
        "--suite",
        metavar="NAME",
        help="instead of RUN ids: the runs `stackcost suite NAME` stored (each model's "
        "latest, on whichever machine), the summary titled by the suite and its unmeasured "
        "models listed",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.api import load_runs

    check_backend(args.baseline)  # a typo would leave every ratio blank, silently
    default = "report.html" if args.format == "html" else None  # else stdout
    output = args.output or default
    # Before the store is read and the report rendered: a bad output costs nothing.
    if output:
        check_output_file(Path(output), "-o", inputs=[Path(args.db)])
    if args.figures:
        check_output_dir(Path(args.figures), "--figures")
    suite, answers = None, []
    if args.advice is not None:
        from stackcost.api.advise import load_advice, measured_runs

        if args.format != "html":
            raise SpecError("--advice is shown in the HTML report (advise --markdown writes md)")
        answers = [load_advice(args.db, args.advice)]
    if args.suite is not None:
        runs, suite = _suite_runs(args)
    else:
        if args.all and args.runs:
            raise SpecError("--all takes every run: give no RUN ids beside it")
        given = args.runs or (measured_runs(answers[0]) if answers else [])
        runs = load_runs(args.db, given, every=args.all)
    if args.format == "html":
        from stackcost.report.html.page import render_html

        out = Path(output or "report.html")
        html = render_html(
            runs, baseline=args.baseline, suite=suite, reference=args.reference, advice=answers
        )
        write_output(out, html, "-o")
        console.print(
            f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB), open it in a browser",
            markup=False,
        )
    else:
        from stackcost.report.exports.formats import export

        if args.format == "run-json":
            from stackcost.compare.diff import run_to_json

            if len(runs) != 1:
                raise SpecError(f"--format run-json takes one run, not {len(runs)}")
            text = run_to_json(runs[0])
        else:
            text = export(runs, args.format, args.baseline, args.reference)
        if args.output:
            write_output(Path(args.output), text, "-o")
            console.print(f"wrote {args.output}", markup=False)
        else:
            with writing("stdout"):  # a full disk, /dev/full
                sys.stdout.write(text + "\n")
                sys.stdout.flush()
    if args.figures:
        from stackcost.report.figures.write import write_figures

        with writing(f"--figures {shown(args.figures)}"):
            paths = write_figures(runs, Path(args.figures), baseline=args.baseline)
            if answers:
                from stackcost.report.figures.advise import advice_figures

                paths += advice_figures(answers[0], Path(args.figures))
        console.print(f"wrote {len(paths)} figure files to {args.figures}", markup=False)
    return 0


def _suite_runs(args: argparse.Namespace) -> tuple[list[Any], tuple[str, list[Any]]]:
    """The stored runs of the suite named by --suite, and (its name, the rows its summary
    should have: each workload at each precision)."""
    from stackcost.report.frames.suite import stored_runs
    from stackcost.runspec.suite import load_suite

    if args.runs:
        raise SpecError(f"--suite {args.suite} picks the runs: give no RUN ids beside it")
    if not Path(args.db).is_file():
        raise SpecError(f"no database at {args.db!r}")
    suite = load_suite(args.suite, for_viewing=True)  # its runs may be from any machine
    found = stored_runs(suite, args.db)
    if not found.runs:
        raise SpecError(
            f"{args.db!r} holds no run of suite {suite.name} "
            f"(run `stackcost suite {args.suite} --db {args.db}` first)"
        )
    return found.runs, (suite.name, found.expected)
