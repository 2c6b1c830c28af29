"""What the always-on disturbance check costs a 1 ms step, measured side by side with it off.

The check reads its counters at the timed loop's first and last instant (/proc/stat's busy
and steal time, the process's CPU time, its involuntary context switches and the CPUs'
frequency, measure/counters.py) and then judges the window (measure/disturbance.assess,
which also reads the load average). Nothing runs inside the timed iterations, so its cost
is a fixed sum per repetition. Two figures:

  paired   the median 1 ms step with the check on against off, in interleaved rounds
           (off, on, on, off), in this one process: what a user's number moves by;
  direct   the check's own cost per repetition, timed over many calls, and that cost
           spread over the repetition's steps (as a share of a 1 ms step).

Target: both under 0.5% of a 1 ms step.

    python benchmarks/disturbance_overhead.py [--rounds 8] [--step-us 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter_ns

from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.measure import protocol as protocol_module
from stackcost.measure.counters import Edge, Window
from stackcost.measure.disturbance import assess
from stackcost.measure.protocol import Protocol, measure
from stackcost.measure.timer import CpuTimer

TARGET = 0.005  # 0.5% of a step


def busy_step(ns: int):
    """A step of known duration that does not depend on caches."""

    def step() -> None:
        end = perf_counter_ns() + ns
        while perf_counter_ns() < end:
            pass

    return step


class _NoCounters:
    """Edge with the counters switched off: what the loop's edges cost without the check."""

    _still = Edge(0, 0.0, None)

    @classmethod
    def now(cls) -> Edge:
        return cls._still


@contextmanager
def check(on: bool):
    """The disturbance check on (the product as it ships) or off (no counter reads)."""
    if on:
        yield
        return
    original = protocol_module.Edge
    protocol_module.Edge = _NoCounters  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        protocol_module.Edge = original  # type: ignore[misc]


def one_repetition(step, p: Protocol, on: bool) -> tuple[float, int]:
    """(median step ns, steps timed), the check's judgement included when on."""
    with check(on):
        m = measure(step, CpuTimer(), p)
        if on and m.window is not None:
            assess(m.window)
    assert m.stats is not None
    return m.stats.median_ms * 1e6, len(m.samples_ns)


def direct_cost_ns(calls: int = 2000) -> float:
    """One repetition's check: two edges and one judgement."""
    t = perf_counter_ns()
    for _ in range(calls):
        first = Edge.now()
        assess(Window.between(first, Edge.now()))
    return (perf_counter_ns() - t) / calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--step-us", type=float, default=1000.0)
    ap.add_argument("--min-time", type=float, default=1.0, help="timed seconds per repetition")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    step = busy_step(int(args.step_us * 1e3))
    p = Protocol(min_time_s=args.min_time, max_time_s=3 * args.min_time, target_ci=0.005)
    one_repetition(step, p, True)  # warm the interpreter's paths
    medians: dict[bool, list[float]] = {True: [], False: []}
    steps: list[int] = []
    pairs: list[float] = []
    for _ in range(args.rounds):
        round_ = {}
        for on in (False, True, True, False):
            median, n = one_repetition(step, p, on)
            medians[on].append(median)
            round_.setdefault(on, []).append(median)
            steps.append(n)
        pairs.append(statistics.mean(round_[True]) / statistics.mean(round_[False]) - 1)
    cost_ns = direct_cost_ns()
    step_ns = args.step_us * 1e3
    per_step = cost_ns / statistics.median(steps) / step_ns
    paired = statistics.median(pairs)
    ok = abs(paired) < TARGET and per_step < TARGET

    table = Table(title=f"disturbance check on a {args.step_us:g} us step ({args.rounds} rounds)")
    for col in ("figure", "value", "share of a step"):
        table.add_column(col, justify="right" if col != "figure" else "left")
    table.add_row("median step, check off", f"{statistics.median(medians[False]) / 1e3:.2f} us", "")
    table.add_row("median step, check on", f"{statistics.median(medians[True]) / 1e3:.2f} us", "")
    table.add_row("paired on/off (median of rounds)", f"{paired:+.3%}", f"{paired:+.3%}")
    table.add_row("check per repetition (direct)", f"{cost_ns / 1e3:.1f} us", "")
    table.add_row(
        f"  spread over {statistics.median(steps):.0f} steps",
        f"{cost_ns / statistics.median(steps):.2f} ns",
        f"{per_step:.5%}",
    )
    console = Console()
    console.print(table)
    verdict = "PASS" if ok else "FAIL"
    console.print(f"{verdict}: target < {TARGET:.1%} of a step (paired and direct)", markup=False)
    if args.json:
        write_figures(
            args.json,
            "disturbance_overhead",
            {
                "step_us": args.step_us,
                "rounds": args.rounds,
                "median_off_ns": statistics.median(medians[False]),
                "median_on_ns": statistics.median(medians[True]),
                "paired_change": paired,
                "pairs": pairs,
                "check_ns_per_repetition": cost_ns,
                "steps_per_repetition": statistics.median(steps),
                "share_per_step": per_step,
                "pass": ok,
            },
            console,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
