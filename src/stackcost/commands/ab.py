"""`stackcost ab MODEL --base SIDE --cand SIDE`: interleaved A/B; exit 1 on a regression,
3 when a cell stayed undecided (noisy), 0 only when every cell was decided and none regressed.

Base and candidate are measured in one invocation, side by side, so the machine's drift
hits both alike. By default each block starts one fresh warm worker a side and alternates
short bursts of steps between them (--pacing bursts); --pacing processes (and any cell that
cannot be cut into bursts) uses ABBA/BAAB blocks of whole-process repetitions. The verdict
comes from paired ratios over the blocks (measure/paired.py). This is the comparison a CI gate on a noisy
machine needs: `stackcost compare` of two stored runs cannot tell drift from change.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from stackcost.api import paired
from stackcost.commands.axes import add_axis_args, axis_fields, number
from stackcost.commands.run import (
    add_import_timeout_arg,
    add_model_args,
    import_timeout,
    machine_lock,
    model_from_args,
    retry_notice,
    this_command,
)
from stackcost.errors import SpecError
from stackcost.outputs import check_output_file, write_output
from stackcost.runspec.grammar import parse_float
from stackcost.runspec.run import db_problem

SIDE_HELP = (
    "a Python interpreter with stackcost installed (another venv), or git:REF (the "
    "project of --repo at REF, installed into its own venv over this one's packages); "
    "default: this environment"
)

# Neither pass (0) nor regression (1): a cell ended noisy. --on-undecided maps it to either.
EXIT_UNDECIDED = 3
ON_UNDECIDED = {"pass": 0, "fail": 1}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ab",
        help="interleaved A/B of a base and a candidate; exit 1 when something regressed, "
        f"{EXIT_UNDECIDED} when a cell stayed noisy",
        description=__doc__.split("\n", 2)[2] if __doc__ else None,
    )
    p.add_argument("model", nargs="?", help="zoo name (see `stackcost list models`)")
    p.add_argument("--model", dest="model_opt", metavar="MODEL", help="zoo name or module:factory")
    add_model_args(p)
    add_axis_args(p, defaults=True)
    _add_side_args(p)
    _add_design_args(p)
    p.add_argument(
        "--on-undecided",
        metavar="pass|fail",
        help="what a noisy (undecided) cell makes the exit status: 0 or 1 "
        f"(default: {EXIT_UNDECIDED}, neither a pass nor a regression)",
    )
    p.add_argument("--seed-order", default="0", help="seed of the block orders (default 0)")
    p.add_argument("--on-disturbed", default="retry", help="retry (default), keep or fail")
    p.add_argument("--no-wait", action="store_true", help="refuse (exit 75) if the machine is busy")
    p.add_argument("--no-reuse", action="store_true", help="cold workers, no artifact cache")
    add_import_timeout_arg(p)
    p.add_argument("--markdown", metavar="FILE", help="also write a summary for a PR comment")
    p.add_argument("--json", metavar="FILE", help="also write the pair's verdicts as JSON")


def _add_side_args(p: argparse.ArgumentParser) -> None:
    """--base and --cand, each with the variables and backend options of its own."""
    for side, what in (("base", "the baseline"), ("cand", "the candidate")):
        p.add_argument(f"--{side}", metavar="SIDE", help=f"{what}: {SIDE_HELP}")
        p.add_argument(
            f"--{side}-env",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"an environment variable {what}'s workers get (repeatable)",
        )
        p.add_argument(
            f"--{side}-option",
            action="append",
            default=[],
            metavar="BACKEND.KEY=VALUE",
            help=f"a backend option for {what} only (repeatable)",
        )
    p.add_argument("--repo", default=".", help="git repository of git:REF sides (default .)")


def _add_design_args(p: argparse.ArgumentParser) -> None:
    """How blocks are measured and when the verdict is clear (api.paired.ab_design)."""
    p.add_argument(
        "--threshold",
        default=str(paired.DEFAULT_THRESHOLD),
        help=f"relative latency change that counts (default {paired.DEFAULT_THRESHOLD})",
    )
    p.add_argument(
        "--alpha",
        default=str(paired.DEFAULT_ALPHA),
        help=f"error budget over all looks (default {paired.DEFAULT_ALPHA})",
    )
    p.add_argument(
        "--pacing",
        default="bursts",
        help="bursts (default): each block a fresh warm worker per side, alternating short "
        "bursts of steps; processes: each block 4 whole repetitions, ABBA or BAAB",
    )
    p.add_argument(
        "--block-time",
        default=str(paired.BLOCK_S),
        help=f"bursts: seconds each block alternates bursts for (default {paired.BLOCK_S:g})",
    )
    p.add_argument(
        "--burst-ms",
        default=str(paired.BURST_MS),
        help=f"bursts: a burst's length in ms, at least one step (default {paired.BURST_MS:g})",
    )
    p.add_argument(
        "--bind-threads",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bursts: bind torch's OpenMP threads one per core (OMP_PROC_BIND=close, "
        "OMP_PLACES=cores) on rungs whose step runs on that pool, at 2+ threads; a side's "
        "own OMP_PROC_BIND wins (default: bind)",
    )
    p.add_argument(
        "--same-cores",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bursts: pin both sides' workers to the same cores, drawn per block, where a "
        "cell has fewer threads than the machine has cores and OpenMP does not bind them; "
        "otherwise each worker stays on the core it started on, and the pair compares two "
        "cores (default: same cores)",
    )
    p.add_argument(
        "--replan",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bursts: at the first look, an undecided cell whose processes differ more than "
        "their bursts gets blocks of half the time and 1.5x the cap; otherwise blocks of "
        "twice the time (default: replan)",
    )
    blocks = paired.BLOCKS.items()
    p.add_argument(
        "--min-blocks",
        help="blocks before the first look (default "
        + ", ".join(f"{k} {v[0]}" for k, v in blocks)
        + ")",
    )
    p.add_argument(
        "--max-blocks",
        help="cap on blocks per cell (default " + ", ".join(f"{k} {v[1]}" for k, v in blocks) + ")",
    )


def exit_code(outcome: str, on_undecided: str | None) -> int:
    """The gate's exit status for an A/B outcome (interleave.ABResult.outcome)."""
    if outcome == "regressed":
        return 1
    if outcome == "undecided":
        return ON_UNDECIDED[on_undecided] if on_undecided else EXIT_UNDECIDED
    return 0


def _design(args: argparse.Namespace) -> Any:
    """The Design from the flags, each refused by name, in the order they are read."""
    paired.check_pacing(args.pacing)
    threshold = parse_float(args.threshold, "--threshold", 0.0, 1.0)
    alpha = parse_float(args.alpha, "--alpha", 0.0, 1.0)
    default_lo, default_hi = paired.BLOCKS[args.pacing]
    lo = int(number(args.min_blocks or str(default_lo), "--min-blocks", int, 1))
    hi = int(number(args.max_blocks or str(default_hi), "--max-blocks", int, 1))
    block_s = parse_float(args.block_time, "--block-time", 0.0, 600.0)
    burst_ms = parse_float(args.burst_ms, "--burst-ms", 0.0, 60_000.0)
    paired.check_blocks(lo, hi)
    seed = int(number(args.seed_order, "--seed-order", int, -1))
    return paired.ab_design(
        threshold=threshold,
        alpha=alpha,
        min_blocks=lo,
        max_blocks=hi,
        seed=seed,
        pacing=args.pacing,
        block_s=block_s,
        burst_ms=burst_ms,
        bind_threads=args.bind_threads,
        same_cores=args.same_cores,
        replan=args.replan,
        allocator=args.allocator or paired.GATE_ALLOCATOR,
    )


def run(args: argparse.Namespace, console: Console) -> int:
    name = args.model_opt or args.model
    if not name:
        raise SpecError("no model given: stackcost ab MODEL --base SIDE --cand SIDE")
    paired.check_policy(args.on_disturbed)
    if args.on_undecided is not None and args.on_undecided not in ON_UNDECIDED:
        raise SpecError(
            f"--on-undecided {args.on_undecided!r} is not a choice (allowed: pass, fail; "
            f"without it a noisy cell exits {EXIT_UNDECIDED})"
        )
    design = _design(args)
    fields = axis_fields(args)
    if fields.get("repeats", 1) != 1:  # named as given: --repeats 3,1 reads as 3
        raise SpecError(
            f"--repeats {args.repeats} does not apply to ab: it measures blocks of 4 "
            "repetitions until the verdict is clear (--min-blocks, --max-blocks)"
        )
    fields = paired.ab_fields(fields, design.allocator)
    for flag in ("markdown", "json"):
        if path := getattr(args, flag):
            check_output_file(Path(path), f"--{flag}", [Path(args.db)])
    if problem := db_problem(args.db):
        raise SpecError(problem)
    model = model_from_args(name, args)
    return _measure(args, console, model, fields, design)


def _measure(args: argparse.Namespace, console: Console, model: Any, fields, design) -> int:
    """Resolve the sides, measure them with block-by-block progress on stderr, and print
    the verdicts; the exit status is the gate's."""
    from stackcost.compare.ab_render import (
        DROP,
        as_json,
        markdown,
        sides_lines,
        summary_line,
        table,
    )
    from stackcost.report.fit import fit

    err = Console(stderr=True)

    def shown(block, pair, side, r) -> None:
        if args.quiet:
            return
        if r.generation is not None:
            g = r.generation
            tpot = "—" if g.tpot_p50_ms is None else f"{g.tpot_p50_ms:.4g} ms"
            value = f"TTFT {g.ttft_ms:.4g} ms, TPOT {tpot} "
        else:
            value = f"{r.stats.median_ms:.4g} ms " if r.stats else ""
        label = pair.cand.label()  # the cell, whichever of its metrics is judged
        cap = pair.cap_in(design)  # a replanned cell's own cap
        err.print(Text(f"block {block + 1}/{cap} {label} {side}: {value}{r.status}"))

    def print_sides(sides) -> None:
        for line in sides_lines(sides):
            err.print(Text(line))

    ab = paired.ab(
        model,
        fields,
        design,
        base=args.base,
        cand=args.cand,
        base_env=args.base_env,
        cand_env=args.cand_env,
        base_options=args.base_option,
        cand_options=args.cand_option,
        repo=args.repo,
        db=args.db,
        lock=lambda: machine_lock(args, err),
        on_disturbed=args.on_disturbed,
        reuse=not args.no_reuse,
        import_timeout_s=import_timeout(args),
        on_log=lambda line: err.print(Text(line)),
        on_sides=print_sides,
        on_repetition=shown,
        on_retry=retry_notice(err),
        command=this_command(),
    )
    for line in sides_lines(ab.sides):
        console.print(line, markup=False, highlight=False)
    hint = " or read every column with --markdown FILE"
    console.print(fit(table(ab), console, console.width, DROP, hint))
    console.print(summary_line(ab), markup=False)
    for c in paired.flagged(ab):  # one plain line per failing cell: greppable in CI logs
        console.print(f"{c.verdict}: {c.label}", markup=False, highlight=False)
    if args.markdown:
        write_output(Path(args.markdown), markdown(ab), "--markdown")
    if args.json:
        write_output(Path(args.json), as_json(ab), "--json")
    console.print(Text.assemble("stored pair ", (ab.pair_id, "bold"), f" in {args.db}"))
    return exit_code(ab.outcome, args.on_undecided)
