"""`stackcost bisect`: find the commit or package version where a measurement got worse.

Contract for --command: run from the checkout's root (git) or the current directory
(versions), exit 0 and print a line `value=<float>`; lower is better unless
--higher-is-better. Example: --command "python bench.py" printing value=0.0123.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from stackcost.errors import SpecError
from stackcost.report.fit import FitTable
from stackcost.spec.grammar import parse_float, split_list


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bisect",
        help="bisect commits (--git) or package versions (--versions) to the first slow one",
        description=__doc__.split("\n", 2)[2] if __doc__ else None,
    )
    p.add_argument(
        "--command",
        dest="shell_command",
        required=True,
        help="shell command that prints value=<float>",
    )
    p.add_argument("--git", metavar="REPO", help="git repository to bisect")
    p.add_argument("--good", help="a good revision (with --git)")
    p.add_argument("--bad", default="HEAD", help="a bad revision (with --git; default HEAD)")
    p.add_argument(
        "--versions",
        help="PKG==v1,PKG==v2,... oldest first, the first good and the last bad; each is "
        "installed with pip into its own venv (needs a package index or --pip-arg)",
    )
    p.add_argument("--pip-arg", action="append", default=[], help="extra pip install argument")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="pairs per point, each the point and the good endpoint beside it (median ratio)",
    )
    p.add_argument("--max-remeasure", type=int, default=2, help="extra runs of an unclear point")
    p.add_argument("--higher-is-better", action="store_true", help="e.g. a throughput")
    p.add_argument("--timeout", default="600", help="seconds per command run (default 600)")


def run(args: argparse.Namespace, console: Console) -> int:
    if bool(args.git) == bool(args.versions):
        raise SpecError("give exactly one of --git REPO or --versions PKG==v1,PKG==v2,...")
    if args.repeats < 1:
        raise SpecError(f"--repeats {args.repeats} must be >= 1")
    if args.max_remeasure < 0:
        raise SpecError(f"--max-remeasure {args.max_remeasure} must be >= 0")
    args.timeout = parse_float(args.timeout, "--timeout", 0.0, 7 * 86400.0, high_closed=True)
    with contextlib.ExitStack() as stack:
        return _bisect(args, console, stack)


def _bisect(args: argparse.Namespace, console: Console, stack: contextlib.ExitStack) -> int:
    from stackcost.compare.bisect import (
        BisectError,
        bisect,
        git_measure,
        git_points,
        version_measure,
    )

    try:
        if args.git:
            if not args.good:
                raise SpecError("--git needs --good REV")
            repo = Path(args.git)
            points = git_points(repo, args.good, args.bad)
            measure = git_measure(repo, args.shell_command, args.timeout)
        else:
            points = split_list(args.versions, "--versions", "torch==2.3.0,torch==2.4.0")
            if len(points) < 2 or any("==" not in v for v in points):
                raise SpecError("--versions needs at least two PKG==VERSION items")
            venvs = stack.enter_context(tempfile.TemporaryDirectory(prefix="stackcost-venvs-"))
            measure = version_measure(args.shell_command, Path(venvs), args.pip_arg, args.timeout)
        result = bisect(
            points,
            measure,
            repeats=args.repeats,
            max_remeasure=args.max_remeasure,
            higher_is_better=args.higher_is_better,
            log=lambda s: console.print(f"  measured {s}", highlight=False, markup=False),
        )
    except BisectError as exc:
        raise SpecError(str(exc)) from None

    ratio = "× good beside it"
    t = FitTable(title="probes (in order)", title_justify="left", drop=(ratio,))
    for col in ("point", "value", ratio, "verdict", "note"):
        t.add_column(col, justify="right" if col in ("value", ratio) else "left")
    for p in result.probes:
        value = "—" if p.value is None else f"{p.value:.4g}"
        ratio = "—" if p.ratio is None else f"{p.ratio:.3f}"
        t.add_row(p.point[:12] if args.git else p.point, value, ratio, p.verdict, p.note)
    console.print(t)
    console.print(
        f"good {result.good_value:.4g}, bad {result.bad_value:.4g}"
        + (f" (bad/good {result.gap_ratio:.3f}x)" if result.gap_ratio else "")
        + ": each point measured beside the good endpoint (alternating order); a point "
        "past the middle of good and bad is bad",
        markup=False,
    )
    if result.first_bad:
        console.print(f"first bad: {result.first_bad}", markup=False)
        return 0
    console.print(
        "ambiguous (skipped points): the first bad is one of " + ", ".join(result.candidates)
    )
    return 1
