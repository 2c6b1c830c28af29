"""What the engine adds per iteration, against a bare timing loop written inline.

--device cpu (default): for an empty step and a ~10 us busy-wait step, each round times the
same step three ways in this one process: a bare inline loop, CpuTimer.run (the engine's
hot loop) and the full protocol (measure() with a short Protocol).

--device cuda: for an empty step (two CUDA events and nothing between them) and a tiny
kernel (an in-place add on one float), the bare loop is the event-timed loop anyone would
write (an event pair per call, recorded back to back, read after one synchronize),
against CudaTimer.run and measure() with CudaTimer.

Rounds rotate the order so no path always runs first; per-round engine-minus-bare
differences are paired, then their median is reported.

Two figures per path:
  median sample  the median of the per-iteration samples (what the engine reports);
  wall/iter      the whole call's wall time over the number of step calls, so the loop's
                 own bookkeeping (range, append, events, stop-rule checks) counts too.

Target: the engine adds <= 1 us per iteration on CPU, <= 2 us with CUDA events, on both
figures.

    python benchmarks/harness_overhead.py [--device cpu|cuda] [--rounds 7] [--quick] \
        [--stress] [--json PATH]
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
from stackcost.measure.timer import CpuTimer, CudaTimer, timer_for

Step = Callable[[], Any]
TARGET_NS = {"cpu": 1_000, "cuda": 2_000}
ENGINE = {"cpu": "CpuTimer.run", "cuda": "CudaTimer.run"}


def paths(device: str) -> tuple[str, str, str]:
    return ("bare", ENGINE[device], "measure()")


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


def run_bare_cuda(step: Step, n: int) -> tuple[list[int], int, int]:
    """The event-timed loop anyone would write: a pair per call, read after one sync."""
    import torch

    w0 = perf_counter_ns()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(n)
    ]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    samples = [int(start.elapsed_time(end) * 1e6) for start, end in events]
    return samples, perf_counter_ns() - w0, n


def run_timer(step: Step, n: int, device: str = "cpu") -> tuple[list[int], int, int]:
    samples: list[int] = []
    timer: CpuTimer | CudaTimer = timer_for(device)
    w0 = perf_counter_ns()
    timer.run(step, n, samples)
    return samples, perf_counter_ns() - w0, n


def run_measure(
    step: Step, protocol: Protocol, device: str = "cpu"
) -> tuple[list[int], int, int, float, str]:
    w0 = perf_counter_ns()
    m = measure(step, timer_for(device), protocol)
    wall = perf_counter_ns() - w0
    # Every step call counts (cold + warmup + timed): the wall covers all of them.
    calls = 1 + m.warmup_iters + len(m.samples_ns)
    timed_per_iter = m.timed_s * 1e9 / max(len(m.samples_ns), 1)
    return m.samples_ns, wall, calls, timed_per_iter, m.stop_reason


def bench_step(
    step: Step, n: int, protocol: Protocol, rounds: int, device: str = "cpu"
) -> dict[str, Any]:
    """Rounds of the three paths, order rotated each round; per-round figures kept."""
    all_paths = paths(device)
    per: dict[str, list[dict[str, Any]]] = {p: [] for p in all_paths}
    for r in range(rounds):
        order = all_paths[r % 3 :] + all_paths[: r % 3]
        for path in order:
            extra: dict[str, Any] = {}
            if path == "bare":
                bare = run_bare_cuda if device == "cuda" else run_bare
                samples, wall, calls = bare(step, n)
            elif path == ENGINE[device]:
                samples, wall, calls = run_timer(step, n, device)
            else:
                samples, wall, calls, timed, reason = run_measure(step, protocol, device)
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
    for path in all_paths:
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


def cuda_steps(iters: int) -> dict[str, tuple[Step, int]]:
    """The GPU steps: nothing between the events, and one tiny kernel (launch-bound)."""
    import torch

    x = torch.zeros(1, device="cuda")
    return {
        "empty (events only)": (lambda: None, iters),
        "tiny kernel": (lambda: x.add_(1.0), iters),
    }


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
    ap.add_argument(
        "--device", default="cpu", help="cpu (default) or cuda: which timer, which steps"
    )
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7)")
    ap.add_argument("--iters-empty", type=int, default=None,
                    help="iterations, empty step (default 200,000 on cpu, 20,000 on cuda)")  # fmt: skip
    ap.add_argument("--iters-busy", type=int, default=None,
                    help="iterations, busy step / tiny kernel (default 20,000)")  # fmt: skip
    ap.add_argument("--busy-us", type=float, default=10.0, help="busy step length, us (cpu)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 2 rounds, 1/20 of the iterations (checks the code path; not a verdict)",
    )
    ap.add_argument(
        "--stress",
        action="store_true",
        help="also time the stop rule when it never holds (cpu; informational, not in the verdict)",
    )
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    device = args.device
    if device not in TARGET_NS:
        print(f"harness_overhead.py: error: --device {device!r}: use cpu or cuda", file=sys.stderr)
        return 2
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                "harness_overhead.py: error: --device cuda: no CUDA device here "
                "(torch.cuda.is_available() is False); use --device cpu",
                file=sys.stderr,
            )
            return 2
    scale = 20 if args.quick else 1
    rounds = args.rounds or (2 if args.quick else 7)
    iters_empty = args.iters_empty or (200_000 if device == "cpu" else 20_000) // scale
    iters_busy = args.iters_busy or 20_000 // scale
    target = TARGET_NS[device]

    # Piped output would otherwise wrap at 80 columns and mangle the table.
    console = Console(width=None if sys.stdout.isatty() else 132)
    # Short enough to keep the run quick; the stop rule and warmup still run as in a real cell.
    protocol = Protocol(min_time_s=0.1, max_time_s=0.5, warmup_max_time_s=0.2)
    if device == "cuda":
        steps = cuda_steps(iters_busy)
        steps["empty (events only)"] = (steps["empty (events only)"][0], iters_empty)
    else:
        busy_label = f"busy {args.busy_us:g} µs"
        steps = {
            "empty": (lambda: None, iters_empty),
            busy_label: (busy_step(int(args.busy_us * 1_000)), iters_busy),
        }

    results: dict[str, Any] = {}
    for name, (step, n) in steps.items():
        with console.status(f"timing {name}: {rounds} rounds x 3 paths"):
            results[name] = bench_step(step, n, protocol, rounds, device)

    table = Table(
        title=f"Harness overhead per iteration on {device} (median of {rounds} rounds)"
        + (" — quick" if args.quick else "")
    )
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
    for name, by_path in results.items():
        for path, r in by_path.items():
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
    for name, by_path in results.items():
        rounds_of = by_path["measure()"]["rounds"]
        reasons = sorted({r["stop_reason"] for r in rounds_of})
        timed = statistics.median(r["timed_loop_wall_per_iter_ns"] for r in rounds_of)
        console.print(
            f"[dim]{name}: measure() timed loop alone {fmt_ns(timed)}/iter "
            f"(incl. stop-rule checks); stop reason: {', '.join(reasons)}[/dim]"
        )
    floor = (
        "The median sample includes one clock read (the timer's floor)"
        if device == "cpu"
        else "A sample is the GPU time between the two events (elapsed_time, ~0.5 µs "
        "resolution); when the host launches slower than the GPU runs, it is the host's "
        "time between the two records"
    )
    console.print(
        f"[dim]Δ = engine minus bare loop, paired by round. {floor}; wall/iter for measure() "
        "spans cold call + warmup + timed loop.[/dim]"
    )

    stress: dict[str, Any] | None = None
    if args.stress and device == "cpu":
        with console.status("stop-rule stress"):
            stress = stress_stop_rule(int(args.busy_us * 1_000), 3)
        loop, bare = stress["timed_loop_wall_per_iter_ns"], stress["timer_run_wall_per_iter_ns"]
        console.print(
            f"stop-rule stress (busy {args.busy_us:g} µs ± 20%, CI target unreachable, runs to "
            f"the iteration cap): measure() timed loop {fmt_ns(loop)}/iter vs CpuTimer.run "
            f"{fmt_ns(bare)}/iter: {fmt_ns(stress['delta_wall_ns'], signed=True)} per iteration "
            "(not in the verdict)"
        )

    ok = worst <= target
    verdict = "PASS" if ok else "FAIL"
    if args.quick:
        verdict = f"SMOKE ({verdict} at quick settings, not a verdict)"
    console.print(
        f"[bold {'green' if ok else 'red'}]{verdict}[/]: worst engine overhead "
        f"{fmt_ns(worst, signed=True)} per iteration on {device} (target ≤ {fmt_ns(target)})"
    )

    if args.json:
        figures: dict[str, Any] = {
            "device": device,
            "quick": args.quick,
            "protocol": protocol.model_dump(),
            "rounds": rounds,
            "target_ns": target,
            "worst_overhead_ns": worst,
            "pass": ok,
            "steps": results,
            "stop_rule_stress": stress,
        }
        if device == "cuda":
            import torch

            figures["cuda"] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
        write_figures(args.json, "harness_overhead", figures, console)
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
