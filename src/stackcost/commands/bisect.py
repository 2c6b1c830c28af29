"""`stackcost bisect`: find the commit or package version where a measurement got worse.

Contract for --command: run from the checkout's root (git) or the current directory
(versions), exit 0 and print a line `value=<float>`; lower is better unless
--higher-is-better. Example: --command "python bench.py" printing value=0.0123.

Cell mode (--git with --model instead of --command): the measurement is one stackcost
cell, the model usually a factory in the repository (--model mypkg.models:make
--input-shape 256 --backends eager). Each commit is installed into its own venv over this
environment, as `stackcost ab --cand git:REF` does, and each point is measured beside the
good endpoint in warm paired workers alternating short bursts (ab's design): two blocks a
call, each block one pair of values. A process per value carries its own bias and the
machine's modes of seconds; bursts inside one block cancel both.

Exit 0: the first bad point found, every point on the way decided; 3: found, but a point
on the way was still unclear at --max-pairs (the answer says which); 1: skipped points
leave it ambiguous.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.api import paired
from stackcost.commands.axes import add_axis_args, axis_fields, number
from stackcost.commands.run import add_model_args, machine_lock, model_from_args, this_command
from stackcost.errors import SpecError
from stackcost.report.fit import FitTable
from stackcost.runspec.grammar import parse_float, split_list
from stackcost.runspec.run import db_problem

# Found, but not every point on the way was decided (as `stackcost ab`'s undecided).
EXIT_UNSURE = 3


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bisect",
        help="bisect commits (--git) or package versions (--versions) to the first slow one",
        description=__doc__.split("\n", 2)[2] if __doc__ else None,
    )
    p.add_argument(
        "--command",
        dest="shell_command",
        help="shell command that prints value=<float> (or cell mode: --model, with --git)",
    )
    p.add_argument(
        "--model",
        dest="model_opt",
        metavar="MODEL",
        help="cell mode (with --git): the model of the one cell measured at each commit, "
        "e.g. a factory in the repository (pkg.module:make with --input-shape)",
    )
    add_model_args(p)
    add_axis_args(p, defaults=True)
    p.add_argument(
        "--no-wait", action="store_true", help="cell mode: refuse (exit 75) if the machine is busy"
    )
    p.add_argument(
        "--seed-order",
        default="0",
        help="cell mode: seed of the burst orders, as stackcost ab takes it (default 0)",
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
        "--min-pairs",
        default="3",
        help="pairs (the point and the good endpoint beside it) before a point's first "
        "look (default 3, at least 2)",
    )
    p.add_argument(
        "--max-pairs",
        default="12",
        help="pairs after which a still-unclear point is judged by its mean, and the "
        "answer is marked unsure (default 12)",
    )
    p.add_argument("--alpha", default="0.05", help="error budget of a point's looks (default 0.05)")
    p.add_argument("--higher-is-better", action="store_true", help="e.g. a throughput")


def run(args: argparse.Namespace, console: Console) -> int:
    if bool(args.git) == bool(args.versions):
        raise SpecError("give exactly one of --git REPO or --versions PKG==v1,PKG==v2,...")
    if bool(args.shell_command) == bool(args.model_opt):
        raise SpecError("give exactly one of --command CMD or --model MODEL (cell mode)")
    if args.model_opt and not args.git:
        raise SpecError("--model (cell mode) bisects commits: give --git REPO")
    from stackcost.compare.bisect import Judging

    lo = int(number(args.min_pairs, "--min-pairs", int, 1))
    hi = int(number(args.max_pairs, "--max-pairs", int, 1))
    if lo > hi:
        raise SpecError(f"--min-pairs {lo} is more than --max-pairs {hi}")
    alpha = parse_float(args.alpha, "--alpha", 0.0, 1.0)
    args.judging = Judging(min_pairs=lo, max_pairs=hi, alpha=alpha)
    args.command_timeout = parse_float(
        args.timeout, "--timeout", 0.0, 7 * 86400.0, high_closed=True
    )
    with contextlib.ExitStack() as stack:
        return _bisect(args, console, stack)


def _bisect(args: argparse.Namespace, console: Console, stack: contextlib.ExitStack) -> int:
    from stackcost.compare.bisect import BisectError, bisect

    def measured(line: str) -> None:
        console.print(f"  measured {line}", highlight=False, markup=False)

    try:
        if args.model_opt:  # cell mode: run() made sure --git is given
            repo, points = _git_points(args)
            result = _bisect_cell(args, repo, points, measured)
        else:
            points, measure = _command_points(args, stack)
            result = bisect(
                points,
                measure,
                judging=args.judging,
                higher_is_better=args.higher_is_better,
                log=measured,
            )
    except BisectError as exc:
        raise SpecError(str(exc)) from None
    console.print(_probes_table(result, args.git))
    return _answer(result, args.git, console)


def _git_points(args: argparse.Namespace) -> tuple[Path, list[str]]:
    """The repository, and its commits from --good to --bad (BisectError on a bad rev)."""
    from stackcost.compare.bisect import git_points

    if not args.good:
        raise SpecError("--git needs --good REV")
    repo = Path(args.git)
    return repo, git_points(repo, args.good, args.bad)


def _command_points(args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[list[str], Any]:
    """--command: the commits or versions, and how a point is measured by the command (a
    process per value, in a worktree of the commit or a venv of the version)."""
    from stackcost.compare.bisect import git_measure, version_measure

    if args.git:
        repo, points = _git_points(args)
        return points, git_measure(repo, args.shell_command, args.command_timeout)
    points = split_list(args.versions, "--versions", "torch==2.3.0,torch==2.4.0")
    if len(points) < 2 or any("==" not in v for v in points):
        raise SpecError("--versions needs at least two PKG==VERSION items")
    venvs = stack.enter_context(tempfile.TemporaryDirectory(prefix="stackcost-venvs-"))
    return points, version_measure(
        args.shell_command, Path(venvs), args.pip_arg, args.command_timeout
    )


def _bisect_cell(args: argparse.Namespace, repo: Path, points: list[str], measured) -> Any:
    """Cell mode: the one cell of the flags at each commit, measured beside the good one
    in warm paired workers (api.paired.bisect) into --db."""
    err = Console(stderr=True)
    fields = paired.cell_fields(axis_fields(args))
    spec = paired.cell_spec(fields, model_from_args(args.model_opt, args))
    if problem := db_problem(args.db):
        raise SpecError(problem)
    lock = machine_lock(args, err)
    seed = int(number(args.seed_order, "--seed-order", int, -1))
    return paired.bisect(
        points,
        spec,
        repo=repo,
        db=args.db,
        judging=args.judging,
        higher_is_better=args.higher_is_better,
        seed=seed,
        lock=lambda: lock,
        on_measured=measured,
        on_log=_ignore if args.quiet else (lambda line: err.print(Text(line))),
        on_notice=lambda line: err.print(Text(line)),
        command=this_command(),
    )


def _ignore(line: str) -> None:
    pass


def _probes_table(result: Any, git: bool) -> FitTable:
    """Every point measured, in the order it was, with its verdict."""
    ratio = "× good beside it"
    t = FitTable(title="probes (in order)", title_justify="left", drop=(ratio, "pairs"))
    for col in ("point", "value", ratio, "pairs", "verdict", "note"):
        t.add_column(col, justify="right" if col in ("value", ratio, "pairs") else "left")
    for p in result.probes:
        value = "—" if p.value is None else f"{p.value:.4g}"
        shown = "—" if p.ratio is None else f"{p.ratio:.3f}"
        verdict = p.verdict + ("?" if not p.sure else "")
        point = p.point[:12] if git else p.point
        t.add_row(point, value, shown, str(len(p.values)), verdict, p.note)
    return t


def _answer(result: Any, git: bool, console: Console) -> int:
    """How the points were judged, and the first bad one: the exit status says how sure."""
    j = result.judging
    console.print(
        f"good {result.good_value:.4g}, bad {result.bad_value:.4g}"
        + (f" (bad/good {result.gap_ratio:.3f}x)" if result.gap_ratio else "")
        + ": each point measured in pairs beside the good endpoint (alternating order), "
        f"{j.min_pairs} to {j.max_pairs} pairs, until the {j.confidence:.1%} interval of its "
        "mean change lies past the middle of good and bad (bad) or short of it (good)",
        markup=False,
    )
    if result.first_bad and result.unsure:
        console.print(
            f"first bad (unsure): {result.first_bad}; "
            f"judged by the mean at the cap of {j.max_pairs} pairs, its interval still on the "
            f"middle: {', '.join(u[:12] if git else u for u in result.unsure)}; rerun "
            "with a larger --max-pairs: each pair is a fresh pair of processes, and more of "
            "them average what each carries of its own",
            markup=False,
        )
        return EXIT_UNSURE
    if result.first_bad:
        console.print(f"first bad: {result.first_bad}", markup=False)
        return 0
    console.print(
        "ambiguous (skipped points): the first bad is one of " + ", ".join(result.candidates)
    )
    return 1
