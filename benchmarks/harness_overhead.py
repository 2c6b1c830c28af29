"""What the engine adds per iteration, against a bare timing loop written inline.

For an empty step and a ~10 us busy-wait step, each round times the same step three ways
in this one process: a bare inline loop, CpuTimer.run (the engine's hot loop) and the full
protocol (measure() with a short Protocol). Rounds rotate the order so no path always runs
first; per-round engine-minus-bare differences are paired, then their median is reported.

Two figures per path:
  median sample  the median of the per-iteration samples (what the engine reports);
  wall/iter      the whole call's wall time over the number of step calls, so the loop's
                 own bookkeeping (range, append, stop-rule checks) counts too.

Target: the engine adds <= 1 us per iteration on both figures.

    python benchmarks/harness_overhead.py [--rounds 7] [--stress] [--json PATH]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost.measure.protocol import Protocol, measure
from stackcost.measure.timer import CpuTimer

Step = Callable[[], Any]
TARGET_NS = 1_000
PATHS = ("bare", "CpuTimer.run", "measure()")


def busy_step(ns: int) -> Step:
    """A step that spins on the clock: its duration is known and does not depend on caches."""

    def step() -> None:
        end = perf_counter_ns() + ns
        while perf_counter_ns() < end:
            pass

    return step


def jittered_step(ns: int, seed: int = 0) -> Step:
    """A busy step of ns +/- 20%: its median CI never shrinks to an unreachable target."""
    rng = random.Random(seed)
    low, high = int(ns * 0.8), int(ns * 1.2)

    def step() -> None:
        end = perf_counter_ns() + rng.randint(low, high)
        while perf_counter_ns() < end:
            pass

    return step


def run_bare(step: Step, n: int) -> tuple[list[int], int, int]:
    # Written the way anyone would time a step by hand: the baseline the engine must match.
    samples: list[int] = []
    w0 = perf_counter_ns()
    for _ in range(n):
        t0 = perf_counter_ns()
        step()
        samples.append(perf_counter_ns() - t0)
    return samples, perf_counter_ns() - w0, n


def run_timer(step: Step, n: int) -> tuple[list[int], int, int]:
    samples: list[int] = []
    timer = CpuTimer()
    w0 = perf_counter_ns()
    timer.run(step, n, samples)
    return samples, perf_counter_ns() - w0, n


def run_measure(step: Step, protocol: Protocol) -> tuple[list[int], int, int, float, str]:
    w0 = perf_counter_ns()
    m = measure(step, CpuTimer(), protocol)
    wall = perf_counter_ns() - w0
    # Every step call counts (cold + warmup + timed): the wall covers all of them.
    calls = 1 + m.warmup_iters + len(m.samples_ns)
    timed_per_iter = m.timed_s * 1e9 / max(len(m.samples_ns), 1)
    return m.samples_ns, wall, calls, timed_per_iter, m.stop_reason


def bench_step(step: Step, n: int, protocol: Protocol, rounds: int) -> dict[str, Any]:
    """Rounds of the three paths, order rotated each round; per-round figures kept."""
    per: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    for r in range(rounds):
        order = PATHS[r % 3 :] + PATHS[: r % 3]
        for path in order:
            extra: dict[str, Any] = {}
            if path == "bare":
                samples, wall, calls = run_bare(step, n)
            elif path == "CpuTimer.run":
                samples, wall, calls = run_timer(step, n)
            else:
                samples, wall, calls, timed, reason = run_measure(step, protocol)
                extra = {"timed_loop_wall_per_iter_ns": timed, "stop_reason": reason}
            per[path].append(
                {
                    "median_sample_ns": statistics.median(samples),
                    "wall_per_iter_ns": wall / calls,
                    "calls": calls,
                    "timed_iters": len(samples),
                    **extra,
                }
            )
    out: dict[str, Any] = {}
    base = per["bare"]
    for path in PATHS:
        rows = per[path]
        out[path] = {
            "median_sample_ns": statistics.median(r["median_sample_ns"] for r in rows),
            "wall_per_iter_ns": statistics.median(r["wall_per_iter_ns"] for r in rows),
            # Paired by round: both sides saw the same machine state.
            "delta_sample_ns": statistics.median(
                r["median_sample_ns"] - b["median_sample_ns"]
                for r, b in zip(rows, base, strict=True)
            ),
            "delta_wall_ns": statistics.median(
                r["wall_per_iter_ns"] - b["wall_per_iter_ns"]
                for r, b in zip(rows, base, strict=True)
            ),
            "calls_per_round": statistics.median(r["calls"] for r in rows),
            "rounds": rows,
        }
    return out


def stress_stop_rule(busy_ns: int, rounds: int) -> dict[str, Any]:
    """The timed loop when the stop rule never holds: every check re-summarizes all samples
    (scipy, O(n)), so its cost per iteration grows until the iteration cap."""
    protocol = Protocol(min_time_s=0.1, max_time_s=5.0, warmup_max_time_s=0.2, target_ci=1e-6)
    step = jittered_step(busy_ns)
    rows = []
    for _ in range(rounds):
        _, wall, n = run_timer(step, 50_000)
        samples, _, _, timed, reason = run_measure(step, protocol)
        rows.append(
            {
                "timer_run_wall_per_iter_ns": wall / n,
                "timed_loop_wall_per_iter_ns": timed,
                "timed_iters": len(samples),
                "stop_reason": reason,
            }
        )
    return {
        "timer_run_wall_per_iter_ns": statistics.median(
            r["timer_run_wall_per_iter_ns"] for r in rows
        ),
        "timed_loop_wall_per_iter_ns": statistics.median(
            r["timed_loop_wall_per_iter_ns"] for r in rows
        ),
        "delta_wall_ns": statistics.median(
            r["timed_loop_wall_per_iter_ns"] - r["timer_run_wall_per_iter_ns"] for r in rows
        ),
        "rounds": rows,
    }


def fmt_ns(value: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if abs(value) >= 1_000:
        return f"{value / 1_000:{sign},.3f} µs"
    return f"{value:{sign},.0f} ns"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--iters-empty", type=int, default=200_000, help="iterations, empty step")
    ap.add_argument("--iters-busy", type=int, default=20_000, help="iterations, busy step")
    ap.add_argument("--busy-us", type=float, default=10.0, help="busy step length, us")
    ap.add_argument(
        "--stress",
        action="store_true",
        help="also time the stop rule when it never holds (informational, not in the verdict)",
    )
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)

    # Piped output would otherwise wrap at 80 columns and mangle the table.
    console = Console(width=None if sys.stdout.isatty() else 132)
    # Short enough to keep the run quick; the stop rule and warmup still run as in a real cell.
    protocol = Protocol(min_time_s=0.1, max_time_s=0.5, warmup_max_time_s=0.2)
    busy_label = f"busy {args.busy_us:g} µs"
    steps: dict[str, tuple[Step, int]] = {
        "empty": (lambda: None, args.iters_empty),
        busy_label: (busy_step(int(args.busy_us * 1_000)), args.iters_busy),
    }

    results: dict[str, Any] = {}
    for name, (step, n) in steps.items():
        with console.status(f"timing {name}: {args.rounds} rounds x {len(PATHS)} paths"):
            results[name] = bench_step(step, n, protocol, args.rounds)

    table = Table(title=f"Harness overhead per iteration (median of {args.rounds} rounds)")
    for col, justify in (
        ("step", "left"),
        ("path", "left"),
        ("calls/round", "right"),
        ("median sample", "right"),
        ("Δ sample", "right"),
        ("wall/iter", "right"),
        ("Δ wall", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    worst = 0.0
    for name, paths in results.items():
        for path, r in paths.items():
            is_base = path == "bare"
            if not is_base:
                worst = max(worst, r["delta_sample_ns"], r["delta_wall_ns"])
            table.add_row(
                name,
                path,
                f"{r['calls_per_round']:,.0f}",
                fmt_ns(r["median_sample_ns"]),
                "—" if is_base else fmt_ns(r["delta_sample_ns"], signed=True),
                fmt_ns(r["wall_per_iter_ns"]),
                "—" if is_base else fmt_ns(r["delta_wall_ns"], signed=True),
            )
        table.add_section()
    console.print(table)
    for name, paths in results.items():
        rounds = paths["measure()"]["rounds"]
        reasons = sorted({r["stop_reason"] for r in rounds})
        timed = statistics.median(r["timed_loop_wall_per_iter_ns"] for r in rounds)
        console.print(
            f"[dim]{name}: measure() timed loop alone {fmt_ns(timed)}/iter "
            f"(incl. stop-rule checks); stop reason: {', '.join(reasons)}[/dim]"
        )
    console.print(
        "[dim]Δ = engine minus bare loop, paired by round. The median sample includes one "
        "clock read (the timer's floor); wall/iter for measure() spans cold call + warmup + "
        "timed loop.[/dim]"
    )

    stress: dict[str, Any] | None = None
    if args.stress:
        with console.status("stop-rule stress"):
            stress = stress_stop_rule(int(args.busy_us * 1_000), 3)
        loop, bare = stress["timed_loop_wall_per_iter_ns"], stress["timer_run_wall_per_iter_ns"]
        console.print(
            f"stop-rule stress (busy {args.busy_us:g} µs ± 20%, CI target unreachable, runs to "
            f"the iteration cap): measure() timed loop {fmt_ns(loop)}/iter vs CpuTimer.run "
            f"{fmt_ns(bare)}/iter: {fmt_ns(stress['delta_wall_ns'], signed=True)} per iteration "
            "(not in the verdict)"
        )

    ok = worst <= TARGET_NS
    verdict = "PASS" if ok else "FAIL"
    console.print(
        f"[bold {'green' if ok else 'red'}]{verdict}[/]: worst engine overhead "
        f"{fmt_ns(worst, signed=True)} per iteration (target ≤ {fmt_ns(TARGET_NS)})"
    )

    if args.json:
        figures = {
            "protocol": protocol.model_dump(),
            "rounds": args.rounds,
            "target_ns": TARGET_NS,
            "worst_overhead_ns": worst,
            "pass": ok,
            "steps": results,
            "stop_rule_stress": stress,
        }
        write_figures(args.json, "harness_overhead", figures, console)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
