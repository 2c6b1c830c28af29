"""The grid's axes as command-line flags, shared by `run` and `sweep`.

`run` fills defaults; `sweep` leaves unset flags as None so a spec file's values stand.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from stackcost.api.catalog import SIZE_AXES
from stackcost.axes import GRID_AXES, PRECISIONS
from stackcost.errors import SpecError
from stackcost.runspec.grammar import (
    check_int,
    parse_choices,
    parse_options,
    parse_positive_ints,
    parse_scenarios,
    split_list,
)
from stackcost.runspec.vocabulary import (
    ALLOCATORS,
    DEFAULT_ALLOCATOR,
    GATE_ALLOCATOR,
    SCENARIO_CHOICES,
    check_allocator,
    check_lengths_form,
    default_threads,
    parse_bound_ms,
    parse_serve_s,
    parse_test_duration_ms,
)

# A flag's default for `run`, or None for `sweep` (add_axis_args).
Default = Callable[[str], str | None]


def add_axis_args(p: argparse.ArgumentParser, defaults: bool) -> None:
    """Every flag of the grid, in --help's order: its axes, how each cell is measured,
    the workers' setup, the scenarios, then the store and the progress display."""

    def d(value: str) -> str | None:
        return value if defaults else None

    _add_grid_args(p, d)
    _add_protocol_args(p, d)
    _add_worker_args(p)
    add_scenario_args(p, defaults)
    p.add_argument("--db", default="stackcost.db", help="SQLite store (default ./stackcost.db)")
    p.add_argument("--quiet", action="store_true", help="no live progress")


def _add_grid_args(p: argparse.ArgumentParser, d: Default) -> None:
    """The axes whose product is the grid's cells, and how many processes each gets."""
    p.add_argument("--backends", default=d("all"), help="comma list, or 'all' (default)")
    p.add_argument(
        "--batch-size",
        default=d("1"),
        help="comma list or range: 1,8 or 8..1024x2 or 32..224+32 (default 1)",
    )
    for axis in SIZE_AXES.values():  # --resolution, --seq-len, --samples
        p.add_argument(
            axis.flag,
            dest=f"size_{axis.name}",
            metavar="N",
            help=f"comma list or range: {axis.help} (default: the model's; "
            f"applies to models that have a {axis.name} axis)",
        )
    for grid in GRID_AXES.values():  # --precision, --threads, --device
        if grid.values:
            p.add_argument(grid.flag, default=d(grid.default or ""), help=grid.help())
        else:
            p.add_argument(
                grid.flag,
                default=d(str(default_threads())),
                help=f"comma list of intra-op thread counts (default {default_threads()}, "
                "this machine)",
            )
    p.add_argument(
        "--mode", default=d("infer"), help="infer (train arrives with `stackcost train`)"
    )
    p.add_argument("--repeats", default=d("1"), help="independent processes per cell")
    p.add_argument(
        "--cell-ci",
        metavar="FRACTION",
        help="repeat each cell until its latency's 95%% CI over processes is within "
        "±this, e.g. 0.02, from max(--repeats, 3) processes up to --max-repeats",
    )
    p.add_argument("--max-repeats", metavar="N", help="upper bound of --cell-ci (default 12)")


def _add_protocol_args(p: argparse.ArgumentParser, d: Default) -> None:
    """How one repetition measures: backend knobs, time limits, the stop rule, the
    output check, the batch search and the profile."""
    p.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="BACKEND.KEY=VALUE",
        help="backend knob, e.g. torchscript.variant=script (repeatable)",
    )
    p.add_argument("--timeout", default=d("600"), help="seconds per repetition (default 600)")
    p.add_argument("--min-time", default=d("1.0"), help="seconds of timed iterations at least")
    p.add_argument("--max-time", default=d("20"), help="cap on timed seconds; hit => unstable")
    p.add_argument(
        "--target-ci", default=d("0.02"), help="stop when the median's 95%% CI is within ±this"
    )
    p.add_argument("--tolerance", help="relative output tolerance, overrides all precisions")
    p.add_argument(
        "--find-max-batch",
        action="store_true",
        help="doubling search from batch 1 for the best-throughput batch size",
    )
    p.add_argument("--max-batch", help="upper bound of --find-max-batch (default 1024)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="where the time goes: breakdown, FLOPs vs measured peak, utilization, energy",
    )
    p.add_argument(
        "--sample-interval",
        help="side-channel sampling interval with --profile, in ms (default 10)",
    )


def _add_worker_args(p: argparse.ArgumentParser) -> None:
    """What each worker process starts with: inherited variables, the memory allocator."""
    p.add_argument(
        "--inherit-env",
        action="append",
        metavar="NAME",
        help="pass this environment variable to workers (repeatable; recorded with the run)",
    )
    p.add_argument(
        "--allocator",
        metavar="|".join(ALLOCATORS),
        help="the workers' memory allocator: "
        + "; ".join(f"{name}, {a.what}" for name, a in ALLOCATORS.items())
        + f" (default {DEFAULT_ALLOCATOR}; ab and bisect: {GATE_ALLOCATOR})",
    )


def add_scenario_args(p: argparse.ArgumentParser, defaults: bool) -> None:
    """MLPerf LoadGen deployment scenarios (stackcost.scenarios) and their knobs."""
    p.add_argument(
        "--scenario",
        default="timed-loop" if defaults else None,
        help=f"comma list of {', '.join(SCENARIO_CHOICES)}, or all (the LoadGen four); "
        "default timed-loop, stackcost's own loop",
    )
    p.add_argument(
        "--latency-bound",
        metavar="DURATION",
        help="server: the p99 latency bound, e.g. 50ms or 0.1s (default 50ms)",
    )
    p.add_argument(
        "--ttft-bound",
        metavar="DURATION",
        help="generate,server: the p99 time-to-first-token bound, e.g. 2s (default 2s)",
    )
    p.add_argument(
        "--tpot-bound",
        metavar="DURATION",
        help="generate,server: the p99 time-per-output-token bound, e.g. 200ms (default 200ms)",
    )
    p.add_argument(
        "--samples-per-query", metavar="N", help="multi-stream: samples per query (default 8)"
    )
    p.add_argument(
        "--instances",
        metavar="N",
        help="server, offline: prepared steps serving queries from N threads (default 1)",
    )
    p.add_argument(
        "--loadgen-min-duration",
        metavar="DURATION",
        help="LoadGen's minimum test duration, e.g. 2s or 500ms (default 2s)",
    )
    p.add_argument(
        "--serve-rates",
        metavar="N",
        help="serve: request rates between one at a time and all at once (default 4)",
    )
    p.add_argument(
        "--serve-time",
        metavar="DURATION",
        help="serve: how long each rate is held, e.g. 20s (default 15s)",
    )
    p.add_argument(
        "--serve-budget",
        metavar="DURATION",
        help="serve: the whole sweep's time limit per cell, e.g. 600s (default 240s); rates "
        "that no longer fit are skipped, saying so",
    )
    p.add_argument(
        "--arrivals",
        choices=("poisson", "constant"),
        help="serve: how requests arrive at each rate (default poisson)",
    )
    p.add_argument(
        "--lengths",
        metavar="FORM",
        help="serve: request lengths: fixed (the --prompt-len/--new-tokens axes, default), "
        "uniform:0.5-1.5 (fractions of them), or file:PATH (prompt_len,new_tokens a line)",
    )
    p.add_argument(
        "--loadgen-min-queries",
        metavar="N",
        help="LoadGen's minimum query count (default: the scenario's early-stopping minimum, "
        "64 / 662 / 459 / 1)",
    )


def scenario_fields(args: argparse.Namespace) -> dict[str, Any]:
    """RunSpec's `scenarios` and `loadgen` from the flags that were given."""
    fields: dict[str, Any] = {}
    if args.scenario is not None:
        fields["scenarios"] = parse_scenarios(args.scenario)
    loadgen: dict[str, Any] = {}
    for key, flag, value in (
        ("latency_bound_ms", "latency-bound", args.latency_bound),
        ("ttft_bound_ms", "ttft-bound", args.ttft_bound),
        ("tpot_bound_ms", "tpot-bound", args.tpot_bound),
    ):
        if value is not None:
            loadgen[key] = parse_bound_ms(value, flag)
    if args.loadgen_min_duration is not None:
        loadgen["min_duration_ms"] = parse_test_duration_ms(
            args.loadgen_min_duration, "loadgen-min-duration"
        )
    for key, flag, value in (
        ("samples_per_query", "samples-per-query", args.samples_per_query),
        ("instances", "instances", args.instances),
        ("min_query_count", "loadgen-min-queries", args.loadgen_min_queries),
    ):
        if value is not None:
            values = parse_positive_ints(value, flag)
            if len(values) != 1:
                raise SpecError(f"{flag} {value[:40]!r} must be one positive integer")
            loadgen[key] = values[0]
    if loadgen.get("instances", 1) > 64:
        raise SpecError(f"instances {loadgen['instances']} is too many (allowed: 1..64)")
    if loadgen:
        fields["loadgen"] = loadgen
    if serve := serve_fields(args):
        fields["serve"] = serve
    return fields


def serve_fields(args: argparse.Namespace) -> dict[str, Any]:
    """RunSpec's `serve` (the sweep of --scenario serve) from the flags that were given."""
    serve: dict[str, Any] = {}
    if args.serve_rates is not None:
        serve["rates"] = int(number(args.serve_rates, "serve-rates", int, minimum=-1))
    for key, flag, value in (
        ("per_rate_s", "serve-time", args.serve_time),
        ("budget_s", "serve-budget", args.serve_budget),
    ):
        if value is not None:
            serve[key] = parse_serve_s(value, flag)
    if args.arrivals is not None:
        serve["arrivals"] = args.arrivals
    if args.lengths is not None:
        serve["lengths"] = check_lengths_form(args.lengths)
    return serve


def number(text: str, what: str, cast: type = float, minimum: float = 0.0) -> Any:
    try:
        value = cast(text)
    except ValueError:
        raise SpecError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(value):  # nan, inf, and 1e309 (which float() reads as inf)
        raise SpecError(f"{what} {text!r} must be a finite number")
    if value <= minimum:
        raise SpecError(f"{what} {text!r} must be greater than {minimum:g}")
    if cast is int:
        check_int(value, what)
    return value


def axis_fields(args: argparse.Namespace) -> dict[str, Any]:
    """RunSpec fields for the flags that were given (all of them, for `run`)."""
    fields: dict[str, Any] = {}
    if args.backends is not None:
        fields["backends"] = (
            "all"
            if args.backends == "all"
            else split_list(args.backends, "--backends", "eager,onnxruntime")
        )
    if args.batch_size is not None:
        fields["batch_sizes"] = parse_positive_ints(args.batch_size, "batch size")
    sizes = {
        axis.name: parse_positive_ints(value, axis.name.replace("_", " "))
        for axis in SIZE_AXES.values()
        if (value := getattr(args, f"size_{axis.name}")) is not None
    }
    if sizes:
        fields["sizes"] = sizes
    for grid in GRID_AXES.values():
        if (value := getattr(args, grid.name)) is not None:
            fields[grid.plural] = (
                parse_choices(value, grid.name, grid.values)
                if grid.values
                else parse_positive_ints(value, grid.name)
            )
    if args.mode is not None:
        fields["modes"] = parse_choices(args.mode, "mode", ("infer",))
    if args.repeats is not None:
        fields["repeats"] = parse_positive_ints(args.repeats, "repeats")[0]
    if args.cell_ci is not None:
        fields["cell_ci"] = number(args.cell_ci, "cell-ci")
        if not 0 < fields["cell_ci"] < 1:
            raise SpecError(f"cell-ci {args.cell_ci!r}: allowed a fraction in (0, 1), e.g. 0.02")
    if args.max_repeats is not None:
        fields["max_repeats"] = parse_positive_ints(args.max_repeats, "max-repeats")[0]
    if args.timeout is not None:
        fields["timeout_s"] = number(args.timeout, "timeout")
    protocol = {
        key: number(value, flag, minimum=-1 if key == "min_time_s" else 0)
        for key, flag, value in (
            ("min_time_s", "min-time", args.min_time),
            ("max_time_s", "max-time", args.max_time),
            ("target_ci", "target-ci", args.target_ci),
        )
        if value is not None
    }
    if protocol:
        fields["protocol"] = protocol
    if args.option:
        fields["backend_options"] = parse_options(args.option)
    if args.tolerance:
        tol = number(args.tolerance, "tolerance")
        fields["tolerance"] = {p: tol for p in PRECISIONS}
    if args.find_max_batch:
        fields["find_max_batch"] = True
    if args.profile:
        fields["profile"] = True
    if args.sample_interval is not None:
        fields["sample_interval_ms"] = number(args.sample_interval, "sample-interval")
    if args.max_batch is not None:
        fields["max_batch"] = parse_positive_ints(args.max_batch, "max-batch")[0]
    if args.inherit_env:
        fields["inherit_env"] = args.inherit_env
    if args.allocator is not None:
        fields["allocator"] = check_allocator(args.allocator)
    fields.update(scenario_fields(args))
    return fields
