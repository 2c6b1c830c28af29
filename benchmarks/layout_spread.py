"""Where a cell's time varies: within one process, or between processes (issue 62).

Fresh worker processes each hold one model warm and time WINDOWS consecutive windows of
--window-s seconds of back-to-back steps, counting the page faults a step takes. A lever
tries to make one process look like the next:

- moved inside the worker, between its windows, so that one process samples several
  layouts (Stabilizer's idea, Curtsinger and Berger, ASPLOS 2013): `inputs` (the
  example's tensors) or `weights` (the parameters and buffers) copied to fresh buffers
  at random 64-byte-aligned offsets, `arena` (spacer blocks of random sizes held on the
  heap, so the activations come from elsewhere in malloc's free lists), or `all`;
- set in the worker's environment before it starts: each of stackcost's allocators
  (stackcost.allocators) by name, e.g. `steady`; `none` is glibc as it is.

For each lever, --processes fresh processes are started, the levers' processes
interleaved (a shuffled round per process index), so the machine's drift falls on every
lever alike. Each row gives the relative SD of window medians within a process (mean over
processes) and of the process medians between processes (measure/stats.process_spreads),
the process medians themselves, the page faults a step took in each, and whether the
output stayed bit-identical to the process's first.

    python benchmarks/layout_spread.py [--model convstack|model|resnet18] [--batch 8]
        [--threads 2] [--levers none,inputs,weights,arena,all,steady] [--processes 6]
        [--window-s 2] [--json PATH]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from stackcost.allocators import ALLOCATORS

if TYPE_CHECKING:
    import torch

HERE = Path(__file__).resolve().parent
WINDOWS = 4

# -- levers moved inside the worker, between its windows -----------------------------------

ALIGN = 64  # bytes: offsets keep the 64-byte alignment the CPU allocator gives
MAX_OFFSET = 64 * 1024  # bytes: spans 16 pages, so page and cache-set offsets both vary
SPACERS = 4  # arena: spacer blocks held at once
MAX_SPACER = 1 << 20  # bytes: up to 1 MiB each

# What each lever moves (the product of the names is "all").
LEVERS = ("none", "inputs", "weights", "arena", "all")


def moved(t: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """A copy of contiguous `t` in a fresh buffer, starting at a random aligned offset."""
    import torch

    item = t.element_size()
    offset = rng.randrange(0, MAX_OFFSET, ALIGN) // item
    buf = torch.empty(offset + t.numel(), dtype=t.dtype, device=t.device)
    out = buf[offset:].view(t.shape)
    out.copy_(t)
    return out


class Relayout:
    """A lever bound to one process's tensors; `apply()` moves them again."""

    def __init__(
        self,
        lever: str,
        inputs: Sequence[torch.Tensor],
        weights: Sequence[torch.Tensor],
        seed: int,
    ) -> None:
        if lever not in LEVERS:
            raise ValueError(f"lever {lever!r} is not one of {', '.join(LEVERS)}")
        self.lever = lever
        self._rng = random.Random(seed)
        everything = lever == "all"
        self._tensors = [
            t
            for t in [
                *(inputs if everything or lever == "inputs" else ()),
                *(weights if everything or lever == "weights" else ()),
            ]
            if t.is_contiguous() and t.numel()
        ]
        self._arena = everything or lever == "arena"
        self._spacers: list[torch.Tensor] = []
        self.moves = 0

    @classmethod
    def of(
        cls, lever: str, model: torch.nn.Module | None, inputs: Iterable[object], seed: int
    ) -> Relayout:
        """The lever over a torch model's parameters and buffers and the tensors among
        `inputs`."""
        import torch

        weights = [*model.parameters(), *model.buffers()] if model is not None else []
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        return cls(lever, tensors, weights, seed)

    @property
    def moves_anything(self) -> bool:
        return bool(self._tensors) or self._arena

    def apply(self) -> None:
        """Move every tensor the lever holds to a fresh buffer (values unchanged)."""
        if not self.moves_anything:
            return
        import torch

        # Outside inference mode: rebinding .data of a normal tensor to an inference
        # tensor is refused, and the step's own mode is unchanged by this.
        with torch.inference_mode(False), torch.no_grad():
            if self._arena:
                self._spacers = [
                    torch.empty(self._rng.randrange(ALIGN, MAX_SPACER, ALIGN), dtype=torch.uint8)
                    for _ in range(SPACERS)
                ]
            for t in self._tensors:
                t.data = moved(t.data, self._rng)
        self.moves += 1


# Levers set in the worker's environment before it starts, rather than moved in it.
ENV_LEVERS = {name: a.env for name, a in ALLOCATORS.items() if a.env}


def worker(args: argparse.Namespace) -> None:
    """One process: build, warm, then WINDOWS windows; a lever between windows."""
    import torch

    sys.path.insert(0, str(HERE))
    import knob_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = getattr(knob_model, args.model)().eval()
    x = torch.randn(args.batch, *knob_model.INPUT_SHAPES[args.model])
    lever = "none" if args.lever in ENV_LEVERS else args.lever
    relayout = Relayout.of(lever, net, [x], seed=args.seed)
    clock = time.perf_counter_ns
    with torch.inference_mode():
        reference = net(x)
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            net(x)
        medians = []
        steps = 0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(WINDOWS):
            relayout.apply()
            net(x)  # the first step after a move pays for it: untimed
            ns: list[int] = []
            end = time.perf_counter() + args.window_s
            while time.perf_counter() < end:
                t0 = clock()
                net(x)
                ns.append(clock() - t0)
            medians.append(statistics.median(ns) / 1e6)
            steps += len(ns) + 1
        same = bool(torch.equal(net(x), reference))
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(
        json.dumps(
            {
                "medians_ms": medians,
                "same_output": same,
                "moves": relayout.moves,
                "faults_per_step": round(faults / steps),
            }
        )
    )


def run_process(args: argparse.Namespace, lever: str, seed: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--worker", "--lever", lever, "--seed", str(seed)]
    argv += ["--model", args.model, "--batch", str(args.batch)]
    argv += ["--threads", str(args.threads), "--window-s", str(args.window_s)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), **ENV_LEVERS.get(lever, {})}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"worker failed: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="convstack")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levers", default="none,inputs,weights,all")
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--window-s", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--lever", default="none", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return

    from stackcost.env import cpu_info
    from stackcost.measure.stats import process_spreads

    levers = args.levers.split(",")
    for lever in levers:
        if lever not in LEVERS and lever not in ENV_LEVERS:
            raise SystemExit(f"--levers: {lever!r} is not a lever (allowed: {', '.join(LEVERS)})")
    rng = random.Random(args.seed)
    runs: dict[str, list[dict[str, Any]]] = {lever: [] for lever in levers}
    console = Console()
    for i in range(args.processes):
        order = rng.sample(levers, len(levers))
        for lever in order:
            runs[lever].append(run_process(args, lever, rng.randrange(2**31)))
            console.print(f"process {i + 1}/{args.processes} {lever}: {runs[lever][-1]}")
    table = Table(title=f"{args.model} b{args.batch} {args.threads} threads: where time varies")
    for col in (
        "lever",
        "within",
        "between",
        "process medians (ms)",
        "page faults a step",
        "output unchanged",
    ):
        table.add_column(
            col, justify="left" if col in ("lever", "process medians (ms)") else "right"
        )
    rows = []
    for lever in levers:
        by_process = [r["medians_ms"] for r in runs[lever]]
        s = process_spreads(by_process)
        medians = [statistics.median(v) for v in by_process]
        same = all(r["same_output"] for r in runs[lever])
        table.add_row(
            lever,
            f"{s.within:.1%}" if s.within is not None else "—",
            f"{s.between:.1%}" if s.between is not None else "—",
            " ".join(f"{m:.1f}" for m in medians),
            " ".join(str(r["faults_per_step"]) for r in runs[lever]),
            "yes" if same else "NO",
        )
        rows.append(
            {
                "faults_per_step": [r["faults_per_step"] for r in runs[lever]],
                "lever": lever,
                "within": s.within,
                "between": s.between,
                "processes": by_process,
                "same_output": same,
            }
        )
    console.print(table)
    if args.json:
        record = {
            "date": time.strftime("%Y-%m-%d"),
            "cpu": cpu_info(),
            "settings": {
                k: v for k, v in vars(args).items() if k not in ("json", "worker", "lever")
            },
            "rows": rows,
        }
        args.json.write_text(json.dumps(record, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
