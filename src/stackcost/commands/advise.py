"""`stackcost advise MODEL`: which rung, precision, batch size and thread count to deploy,
under the user's bounds, searched within a budget (api/advise.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text

from stackcost.advise.constraints import (
    OBJECTIVES,
    PERCENTILES,
    Constraints,
    parse_budget_s,
    parse_memory_bytes,
)
from stackcost.api.advise import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_PRECISIONS,
    FINAL_SWEEP,
    GENERATE_PRECISIONS,
    default_backends,
    sweep_of,
)
from stackcost.api.catalog import SIZE_AXES, check_backend
from stackcost.clip import shown
from stackcost.commands.run import add_model_args, model_from_args, this_command
from stackcost.errors import SpecError
from stackcost.outputs import check_output_dir, check_output_file, write_output, writing
from stackcost.runspec.grammar import parse_float, parse_positive_ints, split_list
from stackcost.runspec.vocabulary import default_threads, parse_bound_ms, parse_serve_s

# What advise searches, by the name `stackcost run --scenario` gives it.
SCENARIO_MODES = {"timed-loop": "infer", "generate": "generate", "serve": "serve"}
PRECISIONS = {"generate": GENERATE_PRECISIONS, "serve": ("fp32",)}  # each mode's default


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "advise",
        help="which rung, precision, batch and threads to deploy, under your bounds",
        description="Search rungs × precisions × batch sizes × threads for MODEL within a "
        "budget: cells that cannot run are found first, a short screening prunes the "
        "clearly worse, the finalists are measured in full, and two within the gate's "
        "resolution are measured side by side. Everything is stored in --db.",
    )
    p.add_argument("model", help="a zoo name, hf:TYPE or hf:./folder, or module:factory")
    add_model_args(p)
    _add_space_args(p)
    _add_bound_args(p)
    p.add_argument("--db", default="stackcost.db", help="SQLite store (default ./stackcost.db)")
    p.add_argument(
        "--artifacts",
        metavar="DIR",
        help="where the finalists' exported and compiled artifacts are kept (default: "
        "advise-artifacts/REQUEST beside --db)",
    )
    p.add_argument(
        "--markdown",
        metavar="PATH",
        help="also write the answer as markdown, its Pareto figure beside it "
        "(PATH's name + -pareto.png and .pdf)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the answer as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _add_space_args(p: argparse.ArgumentParser) -> None:
    """The search space: the grid advise may choose from."""
    p.add_argument(
        "--scenario",
        default="timed-loop",
        help="timed-loop (a forward pass, the default), generate (a decoder's tokens: a "
        "call is one decode step; --prompt-len and --new-tokens size it) or serve (a "
        "decoder's engine under a request-rate sweep, ranked by the rate it holds within "
        "the --tpot-bound and --ttft-bound SLO)",
    )
    p.add_argument(
        "--backends",
        help="comma list (default: every rung available here that runs inference, or that "
        "generates tokens)",
    )
    p.add_argument(
        "--precision",
        help=f"comma list (default {','.join(DEFAULT_PRECISIONS)}; generate: "
        f"{','.join(GENERATE_PRECISIONS)}; serve: fp32)",
    )
    p.add_argument(
        "--batch-size",
        help="comma list or range (default 1,2,4,8,16; serve: 1, the engine batches)",
    )
    threads = ",".join(map(str, sorted({1, default_threads()})))
    p.add_argument("--threads", default=threads, help=f"comma list (default {threads})")
    for axis in SIZE_AXES.values():
        p.add_argument(
            axis.flag, dest=f"size_{axis.name}", metavar="N", help=f"comma list: {axis.help}"
        )


def _add_bound_args(p: argparse.ArgumentParser) -> None:
    """The bounds, what to make best, and how the search spends its budget."""
    p.add_argument(
        "--latency-bound", metavar="DURATION", help="one call's latency bound, e.g. 20ms"
    )
    p.add_argument(
        "--tpot-bound",
        metavar="DURATION",
        help="generate: one decode step's latency bound at --percentile (the latency "
        "bound); serve: the SLO's p99 TPOT",
    )
    p.add_argument(
        "--ttft-bound",
        metavar="DURATION",
        help="generate: the median time to first token, at most; serve: the SLO's p99 TTFT",
    )
    p.add_argument(
        "--percentile", default="p99", help=f"of the latency bound: {', '.join(PERCENTILES)}"
    )
    p.add_argument(
        "--min-throughput",
        metavar="RATE",
        help="at least this many samples/s (generate: tokens/s; serve: requests/s held "
        "within the SLO)",
    )
    p.add_argument("--max-memory", metavar="SIZE", help="peak RSS at most, e.g. 2GiB or 512MiB")
    p.add_argument(
        "--max-quality-loss",
        metavar="LOSS",
        help="quality lost held out against eager fp32, at most: accuracy points for a "
        "classifier, perplexity %% for a decoder (scored as `stackcost heldout` does)",
    )
    p.add_argument(
        "--data",
        metavar="PATH",
        help="a checkpoint folder's own examples the quality bound is judged on, as "
        "`stackcost heldout --data` takes them",
    )
    p.add_argument(
        "--weights-dir",
        metavar="DIR",
        help="where a zoo model's trained weights for the quality bound are kept "
        "(default: heldout's)",
    )
    p.add_argument(
        "--objective",
        help=f"what to make best: {', '.join(OBJECTIVES)} (default latency; serve: "
        "throughput, the rate held within the SLO)",
    )
    p.add_argument(
        "--serve-rates",
        metavar="N",
        help=f"serve: rates between the ends of a finalist's sweep (default {FINAL_SWEEP.rates})",
    )
    p.add_argument(
        "--serve-time",
        metavar="DURATION",
        help=f"serve: how long a finalist's sweep holds each rate (default "
        f"{FINAL_SWEEP.per_rate_s:g}s)",
    )
    p.add_argument("--budget", default="20m", help="time the search may take (default 20m)")
    p.add_argument(
        "--margin",
        default="0.25",
        help="screening prunes a cell only when it breaks a bound or trails the best by more "
        "than this fraction (default 0.25)",
    )
    p.add_argument("--finalists", default="3", help="cells measured in full (default 3)")


def _constraints(args: argparse.Namespace) -> Constraints:
    if args.tpot_bound and args.latency_bound:
        raise SpecError("--tpot-bound is generation's --latency-bound: give one of them")
    latency = (
        (args.tpot_bound, "--tpot-bound")
        if args.tpot_bound
        else (args.latency_bound, "--latency-bound")
    )
    return Constraints(
        latency_bound_ms=parse_bound_ms(*latency) if latency[0] else None,
        ttft_bound_ms=parse_bound_ms(args.ttft_bound, "--ttft-bound") if args.ttft_bound else None,
        percentile=args.percentile,
        min_throughput=(
            parse_float(args.min_throughput, "--min-throughput") if args.min_throughput else None
        ),
        max_memory_bytes=parse_memory_bytes(args.max_memory) if args.max_memory else None,
        max_quality_loss=(
            parse_float(args.max_quality_loss, "--max-quality-loss", 0.0, 100.0, low_closed=True)
            if args.max_quality_loss
            else None
        ),
    )


def _final_sweep(args: argparse.Namespace):  # -> cell.ServeConfig
    """A finalist's sweep: the flags given over FINAL_SWEEP's."""
    rates = FINAL_SWEEP.rates
    if args.serve_rates:
        rates = parse_positive_ints(args.serve_rates, "--serve-rates")[0]
    per_rate = parse_serve_s(args.serve_time, "--serve-time") if args.serve_time else None
    return sweep_of(rates, per_rate or FINAL_SWEEP.per_rate_s)


def _search(args: argparse.Namespace):  # -> api.advise.Search
    from stackcost.api.advise import Search

    if args.scenario not in SCENARIO_MODES:
        raise SpecError(
            f"--scenario {args.scenario!r} is not one advise searches "
            f"(allowed: {', '.join(SCENARIO_MODES)})"
        )
    mode = SCENARIO_MODES[args.scenario]
    if (args.tpot_bound or args.ttft_bound) and mode == "infer":
        flag = "--tpot-bound" if args.tpot_bound else "--ttft-bound"
        raise SpecError(f"{flag} applies to token generation: give --scenario generate or serve")
    if (args.serve_rates or args.serve_time) and mode != "serve":
        flag = "--serve-rates" if args.serve_rates else "--serve-time"
        raise SpecError(f"{flag} applies to --scenario serve")
    backends = default_backends(mode)
    if args.backends:
        backends = split_list(args.backends, "--backends", "onnxruntime,openvino")
        for name in backends:
            check_backend(name)
    sizes = {
        axis: parse_positive_ints(text, f"--{axis.replace('_', '-')}")
        for axis in SIZE_AXES
        if (text := getattr(args, f"size_{axis}", None))
    }
    return Search(
        model=model_from_args(args.model, args),
        backends=backends,
        mode=mode,
        precisions=split_list(
            args.precision or ",".join(PRECISIONS.get(mode, DEFAULT_PRECISIONS)),
            "--precision",
            "fp32,int8",
        ),
        batch_sizes=parse_positive_ints(
            args.batch_size
            or ("1" if mode == "serve" else ",".join(map(str, DEFAULT_BATCH_SIZES))),
            "--batch-size",
        ),
        threads=parse_positive_ints(args.threads, "--threads"),
        sizes=sizes,
        constraints=_constraints(args),
        objective=args.objective or ("throughput" if mode == "serve" else "latency"),
        final_sweep=_final_sweep(args),
        margin=parse_float(args.margin, "--margin", 0.0, 1.0, low_closed=True),
        finalists=parse_positive_ints(args.finalists, "--finalists")[0],
        budget_s=parse_budget_s(args.budget),
        reproduce_model=args.model,
        quality_data=args.data,
        artifacts_dir=args.artifacts,
        weights_dir=args.weights_dir,
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.api.advise import advise, check_search
    from stackcost.report.exports.advise import markdown
    from stackcost.report.terminal.advise import advise_view

    search = _search(args)
    check_search(search)
    for flag, path in (("--markdown", args.markdown), ("--json", args.json)):
        if path:
            check_output_file(Path(path), flag)
    if args.artifacts:
        check_output_dir(Path(args.artifacts), "--artifacts")
    err = Console(stderr=True)
    say = (lambda line: None) if args.quiet else (lambda line: err.print(Text(line, style="dim")))
    answer = advise(search, args.db, command=this_command(), on_phase=say)
    console.print(advise_view(answer))
    console.print(Text.assemble("stored advice ", (answer.id, "bold"), f" in {args.db}"))
    if args.markdown:
        from stackcost.report.figures.advise import advice_figures

        md = Path(args.markdown)
        # The Pareto figure beside it (MD-pareto.png and .pdf), linked by its name.
        with writing(f"--markdown {shown(md)}"):
            figure = advice_figures(answer, md.parent, f"{md.stem}-pareto")
        write_output(md, markdown(answer, figure[0].name if figure else None), "--markdown")
    if args.json:
        write_output(Path(args.json), answer.model_dump_json(indent=2), "--json")
    return 0 if answer.recommended else 1
