"""The regression gate over the family: A/A false alarms and +5%/+10% catches per cell.

For each member of family.py (every one has a slowdown knob: knob_model.py), `stackcost ab`
of its cells, as a user would run it (its defaults: bursts, the gate's allocator), as A/A
(every `regressed` is a false alarm) and with the candidate made +5% and +10% slower
(--cand-env STACKCOST_KNOB_SLOWDOWN: more of the model's identical blocks, real compute).
Per round the members and the slowdowns go in a shuffled order, so the machine's drift
falls on all alike. Each cell of each command is one trial; its wall time is the command's.
The targets (issue 62): A/A false alarms at most 1 in 40 with at least 80% `unchanged`;
+5% caught at least 80%, +10% at least 95%; each cell within 4 minutes. Rates come with
Clopper-Pearson 95% intervals. Every finished command is saved to --json at once.

    PYTHONPATH=benchmarks python benchmarks/gate_family.py [--rounds 2] \
        [--slowdowns 0,0.05,0.10] [--members 0,1,...] [--backends eager,...] [--json PATH]
    python benchmarks/gate_family.py --report PATH...  # the table of saved (or cut) runs

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from family import FAMILY
from gate_calibration import rate, run_ab
from stackcost.env import cpu_info

CELL_LIMIT_S = 240  # the issue's: each cell decided within 4 minutes


def one_ab(member: Any, slowdown: float, work: Path, seed: int, flags: list[str]) -> dict[str, Any]:
    out = work / f"ab-{seed}-{slowdown}.json"
    argv = ["ab", *member.run_args(), "--quiet", "--db", str(work / "ab.db")]
    argv += ["--json", str(out), "--seed-order", str(seed), *flags]
    return run_ab(argv, out, slowdown)


def report(tries: list[dict[str, Any]], slowdowns: list[float], console: Console) -> None:
    """Per cell and true change: the verdicts, and the command's median wall time over its
    cells (ab measures a member's cells together: per cell is that over their number)."""
    table = Table(title="the gate over the family (this machine)")
    for col in ("cell", "true change", "trials", "regressed", "unchanged", "other",
                "median s / cell"):  # fmt: skip
        table.add_column(col, justify="left" if col == "cell" else "right")
    cells = list(dict.fromkeys(armed(t, c["cell"]) for t in tries for c in t.get("cells", [])))
    for cell in cells:
        for s in slowdowns:
            mine = [(t, c) for t in tries if t["slowdown"] == s for c in t.get("cells", [])
                    if armed(t, c["cell"]) == cell]  # fmt: skip
            if not mine:
                continue
            verdicts = [c["verdict"] for _, c in mine]
            per_cell = [t["wall_s"] / len(t["cells"]) for t, _ in mine]
            table.add_row(cell, f"+{s:.0%}", str(len(mine)), str(verdicts.count("regressed")),
                          str(verdicts.count("unchanged")),
                          str(len(verdicts) - verdicts.count("regressed")
                              - verdicts.count("unchanged")),
                          f"{statistics.median(per_cell):.0f}")  # fmt: skip
    console.print(table)
    for line in pooled(tries, slowdowns):
        console.print(line, highlight=False)


def armed(trial: dict[str, Any], cell: str) -> str:
    """A cell's row label: with the try's arm (its `ab` flags), where the run had arms."""
    return f"{cell} [{trial['arm']}]" if trial.get("arm") else cell


def pooled(tries: list[dict[str, Any]], slowdowns: list[float]) -> list[str]:
    """Per true change, every cell's trials pooled: how many `regressed`, with the rate's
    Clopper-Pearson 95% interval, and how many `unchanged`."""
    lines = []
    for s in slowdowns:
        verdicts = [c["verdict"] for t in tries if t["slowdown"] == s for c in t.get("cells", [])]
        if not verdicts:  # a change these tries did not run: no rate to state
            continue
        k = verdicts.count("regressed")
        r, lo, hi = rate(k, len(verdicts))
        lines.append(f"all cells, +{s:.0%}: regressed {k}/{len(verdicts)} = {r:.1%} "
                     f"[{lo:.1%}, {hi:.1%}]; unchanged {verdicts.count('unchanged')}")  # fmt: skip
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--slowdowns", default="0,0.05,0.10")
    ap.add_argument("--members", help="comma list of family.py indices (default: all)")
    ap.add_argument("--backends", help="comma list: only these of each member's backends")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--arms",
        nargs="+",
        metavar="NAME=FLAGS",
        help="try every command once per arm, interleaved: NAME=extra `ab` flags, e.g. "
        "same= apart=--no-same-cores (default: one arm, ab's defaults)",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--report", type=Path, nargs="+", help="only print the table of saved --json records"
    )
    args = ap.parse_args()
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    if args.report:
        saved = [t for path in args.report for t in json.loads(path.read_text())["tries"]]
        report(saved, slowdowns, Console(width=160))
        return 0
    chosen = [int(i) for i in args.members.split(",")] if args.members else range(len(FAMILY))
    members = [(i, FAMILY[i]) for i in chosen]
    if args.backends:
        keep = args.backends.split(",")
        members = [(i, replace(m, backends=tuple(b for b in m.backends if b in keep)))
                   for i, m in members]  # fmt: skip
        members = [(i, m) for i, m in members if m.backends]
    unknobbed = [m.model for _, m in members if not m.model.startswith("knob_model:")]
    if unknobbed:
        raise SystemExit(f"no slowdown knob for {', '.join(unknobbed)}")
    arms = dict(a.partition("=")[::2] for a in args.arms) if args.arms else {"": ""}
    rng = random.Random(args.seed)
    console = Console()
    started = time.perf_counter()
    tries: list[dict[str, Any]] = []

    def save() -> None:
        if args.json:
            record = {
                "date": time.strftime("%Y-%m-%d"),
                "cpu": cpu_info(),
                "settings": {k: str(v) for k, v in vars(args).items() if k != "json"},
                "family": [m.what for m in FAMILY],
                "tries": tries,
                "wall_s": time.perf_counter() - started,
            }
            args.json.write_text(json.dumps(record, indent=1, default=str) + "\n")

    with tempfile.TemporaryDirectory(prefix="stackcost-gate-family-") as tmp:
        for r in range(args.rounds):
            order = [(i, m, s, a) for i, m in members for s in slowdowns for a in arms]
            rng.shuffle(order)
            for i, member, slowdown, arm in order:
                seed = args.seed * 1000 + len(tries)
                found = one_ab(member, slowdown, Path(tmp), seed, arms[arm].split())
                tries.append({"round": r + 1, "member": i, "slowdown": slowdown, **found}
                             | ({"arm": arm, "flags": arms[arm]} if arm else {}))  # fmt: skip
                save()
                said = (
                    ", ".join(f"{c['cell']}: {c['verdict']}" for c in found.get("cells", []))
                    or f"error: {found.get('error')}"
                )
                console.print(f"round {r + 1} {member.what} +{slowdown:.0%} {arm} "
                              f"({found['wall_s']:.0f} s): {said}", highlight=False)  # fmt: skip
    report(tries, slowdowns, console)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
