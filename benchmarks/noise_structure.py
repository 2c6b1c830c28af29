"""The noise an A/B comparison meets on this machine, by how A and B alternate.

Two identical worker processes, A and B, each hold the same model warm (an A/A test:
every difference between them is noise). Per window, a fresh pair of processes is
started (which side first: at random, recorded), and one design alternates them:

- turns: A then B, turns of --turn-s seconds each (today's process-level blocks);
- bursts: a few iterations each (at least one step, about --burst-ms), order flipped at
  random per pair, so a pair sees one mode of the machine;
- duet: both at once, 1 thread each (Bulej et al., ICPE 2020);
- bursts-bound: bursts, each worker's OpenMP threads bound one per core
  (OMP_PROC_BIND=close, OMP_PLACES=cores: libgomp, which torch's CPU wheel uses), so
  every process places its threads alike;
- bursts-1t: bursts at 1 thread whatever --threads says.

The windows of the designs are interleaved (a shuffled round of designs per window
index), so the machine's drift over the session hits all alike. A window gives one A/A
estimate, log(B / A); the table gives their spread across windows (sd, worst) and the
pairs a window holds. The slot row asks whether the side started first reads faster: the
mean estimate signed by spawn order, with its 95% interval over all windows.

    python benchmarks/noise_structure.py [--model mlp --resolution 256 | --model
        mnist-cnn --resolution 28] [--batch 32] [--threads 2] [--windows 6]
        [--window-s 10] [--designs turns,bursts,duet,bursts-bound,bursts-1t] [--json PATH]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from stackcost.env import cpu_info
from stackcost.measure.paired import mean_interval

DESIGNS = ("turns", "bursts", "duet", "bursts-bound", "bursts-1t")
# Designs that alternate bursts, and what each changes of the workers.
BURSTS = ("bursts", "bursts-bound", "bursts-1t")
BOUND_ENV = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}


# -- the worker: one process holding the model warm, answering one command per line ------


def worker(model: str, resolution: int, batch: int, threads: int) -> None:
    """Commands on stdin: `run N` -> `ns` of N steps; `for S` -> the step times (ns) of
    S seconds of back-to-back steps; `quit`."""
    import torch

    from stackcost import zoo
    from stackcost.runspec.run import model_ref
    from stackcost.workload import make_example

    torch.set_num_threads(threads)
    ref, sizes = model_ref(model), {"resolution": resolution}
    net = zoo.build_model(ref, sizes).eval()
    example = make_example(zoo.workload_of(ref), ref, batch, sizes)
    clock = time.perf_counter_ns

    def step() -> None:
        net(*example.args, **example.kwargs)

    with torch.inference_mode():
        for _ in range(10):
            step()
        reply({"ready": True})
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "run":
                t = clock()
                for _ in range(int(arg)):
                    step()
                reply({"ns": clock() - t})
            elif cmd == "for":
                end, times = clock() + int(float(arg) * 1e9), []
                while (t := clock()) < end:
                    step()
                    times.append(clock() - t)
                reply({"times": times})
            else:
                return


def reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


# -- the parent ----------------------------------------------------------------------


class Side:
    def __init__(self, args: argparse.Namespace, threads: int, env: dict[str, str]) -> None:
        argv = [sys.executable, __file__, "--worker", "--model", args.model]
        argv += ["--resolution", str(args.resolution)]
        argv += ["--batch", str(args.batch), "--threads", str(threads)]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )

    def send(self, command: str) -> None:
        stdin: IO[str] = self.proc.stdin  # type: ignore[assignment]
        stdin.write(command + "\n")
        stdin.flush()

    def answer(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("a worker died")
        return json.loads(line)

    def close(self) -> None:
        self.send("quit")
        self.proc.wait(timeout=30)


def window(design: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    """One fresh pair, one design, one window: the A/A estimate log(B / A)."""
    first = rng.choice("AB")
    threads = 1 if design in ("duet", "bursts-1t") else args.threads
    env = BOUND_ENV if design == "bursts-bound" else {}
    sides: dict[str, Side] = {}
    for name in (first, "B" if first == "A" else "A"):
        sides[name] = Side(args, threads, env)
    for s in sides.values():
        assert s.answer().get("ready")
    a, b = sides["A"], sides["B"]
    try:
        if design == "duet":
            for s in (a, b):
                s.send(f"for {args.window_s}")
            ta, tb = a.answer()["times"], b.answer()["times"]
            estimate = math.log(statistics.median(tb) / statistics.median(ta))
            pairs = min(len(ta), len(tb))
        elif design == "turns":
            n = calibrate(a, args.turn_s)
            logs: dict[str, list[float]] = {"A": [], "B": []}
            end = time.monotonic() + args.window_s
            while time.monotonic() < end:
                for name in ("A", "B"):
                    sides[name].send(f"run {n}")
                    logs[name].append(math.log(sides[name].answer()["ns"] / n))
            estimate = statistics.fmean(logs["B"]) - statistics.fmean(logs["A"])
            pairs = len(logs["A"])
        else:
            assert design in BURSTS
            n = calibrate(a, args.burst_ms / 1e3)
            ratios = []
            end = time.monotonic() + args.window_s
            while time.monotonic() < end:
                got = {}
                for name in rng.sample(["A", "B"], 2):
                    sides[name].send(f"run {n}")
                    got[name] = sides[name].answer()["ns"]
                ratios.append(math.log(got["B"] / got["A"]))
            estimate, pairs = statistics.fmean(ratios), len(ratios)
    finally:
        for s in sides.values():
            s.close()
    return {"design": design, "first": first, "estimate": estimate, "pairs": pairs}


def calibrate(side: Side, seconds: float) -> int:
    """Steps that take about `seconds` (at least one)."""
    side.send("run 5")
    per_step = side.answer()["ns"] / 5 / 1e9
    return max(1, round(seconds / per_step))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="mlp")
    parser.add_argument(
        "--resolution", type=int, default=256, help="input size (an MLP's width, a CNN's pixels)"
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--windows", type=int, default=6, help="windows per design")
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--turn-s", type=float, default=1.5)
    parser.add_argument("--burst-ms", type=float, default=20.0)
    parser.add_argument("--designs", default="turns,bursts,duet")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--json", type=Path, default=Path("benchmarks/results/noise_structure.json")
    )
    args = parser.parse_args()
    if args.worker:
        worker(args.model, args.resolution, args.batch, args.threads)
        return
    designs = args.designs.split(",")
    if unknown := set(designs) - set(DESIGNS):
        parser.error(f"--designs {','.join(sorted(unknown))}: allowed {', '.join(DESIGNS)}")
    console, rng = Console(), random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    started = time.strftime("%Y-%m-%d %H:%M")
    for i in range(args.windows):
        for design in rng.sample(designs, len(designs)):
            r = window(design, args, rng)
            rows.append(r)
            console.print(
                f"window {i + 1}/{args.windows} {design}: log(B/A) {r['estimate']:+.4f} "
                f"({r['pairs']} pairs, {r['first']} started first)"
            )
    table = Table(title=f"A/A spread per {args.window_s:g} s window ({args.model}, {started})")
    for col in ("design", "windows", "pairs per window", "sd of log(B/A)", "worst |log(B/A)|"):
        table.add_column(col, justify="right")
    for design in designs:
        est = [r["estimate"] for r in rows if r["design"] == design]
        pairs = sorted(r["pairs"] for r in rows if r["design"] == design)
        sd = statistics.stdev(est) if len(est) > 1 else float("nan")
        table.add_row(
            design,
            str(len(est)),
            f"{pairs[0]}-{pairs[-1]}",
            f"{sd:.2%}",
            f"{max(map(abs, est)):.2%}",
        )
    console.print(table)
    # Slot bias: + when the side started second reads slower, whatever its name.
    signed = [r["estimate"] * (1 if r["first"] == "A" else -1) for r in rows]
    mean, low, high = mean_interval(signed, 0.95)
    console.print(
        f"slot: the side started second reads {mean:+.2%} [{low:+.2%}, {high:+.2%}] "
        f"(95% interval over {len(signed)} windows; 0 inside: no slot bias seen)"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "cpu": cpu_info().get("model"),
                "started": started,
                "args": {k: v for k, v in vars(args).items() if k not in ("json", "worker")},
                "windows": rows,
                "slot_bias": {"mean": mean, "low": low, "high": high},
            },
            indent=2,
        )
    )
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
