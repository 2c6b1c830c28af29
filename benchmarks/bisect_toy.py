"""Does `stackcost bisect` name the right commit on this machine? Tries on toy histories.

A toy git repository of 8 commits whose `bench.py` prints `value=`: the median of 300
calls of a stack of Linear layers (width 256, batch 32, 1 thread). Commit 5 adds layers:
3 on a 10-layer stack is the issue's true 1.3x; 1 on 10 is 1.1x. Each try runs the
command line a user would (`stackcost bisect --git REPO --good HEAD~7 --bad HEAD`), in a
process of its own, and counts its answer: the right commit (sure or unsure), a wrong one
marked unsure, or a wrong one stated as sure (the failure that must never happen).

    python benchmarks/bisect_toy.py [--steps 1.3,1.1] [--tries 10] [--json PATH]

--design cells: the same history as a package (`toynet`, pyproject.toml, a factory `make`
building the stack), bisected in cell mode (`--model toynet:make --input-shape 256
--backends eager --batch-size 32 --threads 1`): each commit installed into its own venv
and each point measured beside the good endpoint in warm paired workers alternating
bursts. The venvs are kept in ~/.cache/stackcost/ab-venvs, per commit.

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from stackcost.env import cpu_info

BENCH = """\
import statistics, time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
net = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range({layers})]).eval()
x = torch.randn(32, 256)
times = []
with torch.inference_mode():
    for _ in range(20):
        net(x)
    for _ in range(300):
        t = time.perf_counter()
        net(x)
        times.append(time.perf_counter() - t)
print("value=%.9f" % statistics.median(times))
"""
PACKAGE = """\
\"\"\"commit {i}\"\"\"
import torch


def make():
    return torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range({layers})])
"""
PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "toynet"
version = "0.{i}"
"""
CELL = ["--model", "toynet:make", "--input-shape", "256", "--backends", "eager"]
CELL += ["--batch-size", "32", "--threads", "1", "--quiet"]
BASE_LAYERS = 10
# The step's true ratio -> layers added at commit 5 (the Linear stack's cost is ~linear).
ADDED = {1.3: 3, 1.1: 1}


def make_history(root: Path, files_of: Callable[[int], dict[str, str]]) -> list[str]:
    """A git repository of 8 commits, commit i holding files_of(i) (path -> text); the
    commits' shas, oldest first."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
        return out.stdout.decode().strip()

    root.mkdir(parents=True)
    git("init", "-q")
    git("config", "user.email", "bench@stackcost")
    git("config", "user.name", "bench")
    shas = []
    for i in range(1, 9):
        for path, text in files_of(i).items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        git("add", "-A")
        git("commit", "-q", "-m", f"commit {i}")
        shas.append(git("rev-parse", "HEAD"))
    return shas


def make_repo(root: Path, added: int, cells: bool = False) -> list[str]:
    def files_of(i: int) -> dict[str, str]:
        layers = BASE_LAYERS + (added if i >= 5 else 0)
        if cells:
            return {
                "toynet/__init__.py": PACKAGE.format(i=i, layers=layers),
                "pyproject.toml": PYPROJECT.format(i=i),
            }
        return {"bench.py": f"# commit {i}\n" + BENCH.format(layers=layers)}

    return make_history(root, files_of)


def one_try(
    repo: Path,
    shas: list[str],
    extra: list[str],
    cell: list[str] | None = None,
    seed: int = 0,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One `stackcost bisect` of the history, in cell mode with `cell`'s flags (else the
    command mode on bench.py); what it named, and whether that was the step (commit 5)."""
    argv = [sys.executable, "-m", "stackcost.cli", "bisect", "--git", str(repo)]
    argv += ["--good", shas[0], "--bad", shas[-1]]
    if cell:
        argv += [*cell, "--db", str(repo.parent / f"{repo.name}.db"), "--seed-order", str(seed)]
    else:
        argv += ["--command", f"{sys.executable} bench.py"]
    t = time.perf_counter()
    proc = subprocess.run([*argv, *extra], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t
    named = None
    for line in proc.stdout.splitlines():
        if line.startswith("first bad"):
            named = line.split(":", 1)[1].split(";")[0].strip()
    unsure = "first bad (unsure)" in proc.stdout
    right = named is not None and shas[4].startswith(named[:12])
    kind = "right" if right else ("unsure-wrong" if unsure else "wrong")
    if named is None:
        kind = "no answer"
    return {"code": proc.returncode, "named": named, "unsure": unsure, "kind": kind,
            "seconds": round(seconds, 1), "tail": proc.stdout.splitlines()[-3:]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1.3,1.1", help="true ratios: 1.3 and/or 1.1")
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--bisect-arg", action="append", default=[], help="passed to bisect")
    parser.add_argument(
        "--first-seed", type=int, default=0,
        help="cells: try i's burst orders come from --seed-order FIRST+i",
    )  # fmt: skip
    parser.add_argument(
        "--design", default="processes", choices=("processes", "cells"),
        help="processes: bench.py, a process per value; cells: cell mode, warm paired workers",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/bisect_toy.json"))
    args = parser.parse_args()
    console = Console()
    steps = [float(s) for s in args.steps.split(",")]
    results: dict[str, Any] = {
        "cpu": cpu_info().get("model"),
        "design": args.design,
        "tries": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        repos = {s: Path(tmp) / f"step{s}" for s in steps}
        cells = args.design == "cells"
        shas = {s: make_repo(repos[s], ADDED[s], cells) for s in steps}
        for i in range(args.tries):  # the steps interleaved, try by try
            for s in steps:
                cell = CELL if cells else None
                r = one_try(repos[s], shas[s], args.bisect_arg, cell, args.first_seed + i)
                results["tries"].setdefault(str(s), []).append(r)
                console.print(f"step {s}x try {i + 1}: {r['kind']} ({r['seconds']} s)")
    table = Table(title="stackcost bisect on toy histories (commit 5 of 8 is the step)")
    for col in ("true step", "tries", "right", "of which unsure", "wrong, unsure", "wrong, sure",
                "median s"):  # fmt: skip
        table.add_column(col, justify="right")
    for s, tries in results["tries"].items():
        kinds = [t["kind"] for t in tries]
        seconds = sorted(t["seconds"] for t in tries)
        table.add_row(
            f"{s}x",
            str(len(tries)),
            str(kinds.count("right")),
            str(sum(t["kind"] == "right" and t["unsure"] for t in tries)),
            str(kinds.count("unsure-wrong")),
            str(kinds.count("wrong")),
            f"{seconds[len(seconds) // 2]:.0f}",
        )
    console.print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
