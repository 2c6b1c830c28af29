"""Does `stackcost bisect` name the commit of a 1.1x step in each cell of the family?

For each member of family.py, a toy history of 8 commits of a package `toynet` whose
factory `make` builds the member's model from knob_model.py; commit 5 makes it --step
slower (0.1: 10% more of its identical blocks, real compute in every rung). Each of the
member's cells is bisected in cell mode, as a user would (`stackcost bisect --git REPO
--good HEAD~7 --bad HEAD --model toynet:make ...`): every commit installed into its own venv,
each point measured beside the good endpoint in warm paired workers alternating bursts,
with the gate's allocator. A try's answer is the right commit (sure or unsure), a wrong one
marked unsure, or a wrong one stated as sure: the failure that must never happen.

    PYTHONPATH=benchmarks python benchmarks/bisect_family.py [--tries 1] [--step 0.1] \
        [--json PATH]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bisect_toy import PYPROJECT, make_history, one_try
from family import FAMILY
from stackcost.env import cpu_info

HERE = Path(__file__).resolve().parent
PACKAGE = '''"""commit {i}"""
import knob_model


def make():
    return knob_model.{factory}(slowdown={slowdown})
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tries", type=int, default=1, help="bisects per cell")
    ap.add_argument("--step", type=float, default=0.1, help="commit 5's slowdown (0.1: 1.1x)")
    ap.add_argument("--bisect-arg", action="append", default=[], help="passed to bisect")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    unknobbed = [m.model for m in FAMILY if not m.model.startswith("knob_model:")]
    if unknobbed:
        raise SystemExit(f"no slowdown knob for {', '.join(unknobbed)}: family.py's models")
    console = Console()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.perf_counter()
    tries: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stackcost-bisect-family-") as tmp:
        for m, member in enumerate(FAMILY):
            factory = member.model.split(":", 1)[1]

            def files_of(i: int, factory: str = factory) -> dict[str, str]:
                slowdown = args.step if i >= 5 else 0.0
                package = PACKAGE.format(i=i, factory=factory, slowdown=slowdown)
                return {"toynet/__init__.py": package, "pyproject.toml": PYPROJECT.format(i=i)}

            repo = Path(tmp) / f"member{m}"
            shas = make_history(repo, files_of)
            for backend in member.backends:
                cell = ["--model", "toynet:make", "--input-shape", str(member.input_shape)]
                cell += ["--backends", backend, "--batch-size", str(member.batch_size)]
                cell += ["--threads", str(member.threads), "--quiet"]
                for i in range(args.tries):
                    r = one_try(repo, shas, args.bisect_arg, cell, seed=i, env=env)
                    r |= {"member": member.what, "backend": backend, "try": i + 1}
                    tries.append(r)
                    console.print(f"{member.what}, {backend}, try {i + 1}: {r['kind']}"
                                  f"{' (unsure)' if r['unsure'] else ''} in {r['seconds']} s "
                                  f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
    table = Table(title=f"stackcost bisect of a {1 + args.step:g}x step at commit 5 of 8, "
                  "per family cell (this machine)")  # fmt: skip
    for col in ("cell", "tries", "right", "of which unsure", "wrong, unsure", "wrong, sure",
                "no answer", "seconds"):  # fmt: skip
        table.add_column(col, justify="left" if col == "cell" else "right")
    for key in dict.fromkeys((t["member"], t["backend"]) for t in tries):
        mine = [t for t in tries if (t["member"], t["backend"]) == key]
        kinds = [t["kind"] for t in mine]
        table.add_row(
            f"{key[0]}, {key[1]}",
            str(len(mine)),
            str(kinds.count("right")),
            str(sum(t["kind"] == "right" and t["unsure"] for t in mine)),
            str(kinds.count("unsure-wrong")),
            str(kinds.count("wrong")),
            str(kinds.count("no answer")),
            " ".join(f"{t['seconds']:.0f}" for t in mine),
        )
    console.print(table)
    if args.json:
        record = {
            "date": time.strftime("%Y-%m-%d"),
            "cpu": cpu_info(),
            "settings": {k: str(v) for k, v in vars(args).items() if k != "json"},
            "tries": tries,
            "wall_s": time.perf_counter() - started,
        }
        args.json.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
