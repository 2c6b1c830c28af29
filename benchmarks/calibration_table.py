"""The family's calibration table: one row per cell, from the family benchmarks' records.

Joins, per cell of family.py, what each record holds:
- allocator_family.py: the spread within a process and between processes under each
  allocator (glibc as the process is, steady as the gate runs it: before and after);
- gate_family.py: the gate's verdicts on A/A, +5% and +10%, and its seconds a cell (the
  tries run without --arms, or those of the arm --arm names);
- bisect_family.py (optional): how many bisects of a 1.1x step named the commit, sure;
- agreement_family.py (optional): stackcost / its peer on the same cell.
Then it says, cell by cell, which of issue 62's targets its tries meet: A/A `unchanged` at
least 80% and no false alarm rate above 1 in 40, +5% caught at least 80%, +10% at least
95%, each cell within 4 minutes, every bisect right and sure, the peer within 3%. A rate rests on few tries: the 95% Clopper-Pearson
interval of the pooled rates is printed below the table.

Every record must come from one machine (the same CPU model and flags): the table refuses
to mix machines.

    python benchmarks/calibration_table.py --spreads allocator_family.json \
        --gate gate_family.json [more gate records] [--arm NAME] \
        [--bisect bisect_family.json] [--agreement agreement_family.json] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from family import FAMILY
from gate_family import CELL_LIMIT_S, pooled

# The peer that times what each backend runs (agreement_family.PEER_OF), read backwards.
BACKEND_OF_PEER = {"torch": "eager", "inductor": "inductor", "onnxruntime": "onnxruntime",
                   "openvino": "openvino"}  # fmt: skip
UNCHANGED_AT_LEAST, FALSE_ALARMS_AT_MOST = 0.80, 1 / 40
CAUGHT_AT_LEAST = {0.05: 0.80, 0.10: 0.95}
PEERS_WITHIN = 0.03


def member_cell(what: str, backend: str) -> str | None:
    """The cell label of a family member's backend, as the stores write it; None for a
    member the family no longer has (an older record's)."""
    for m in FAMILY:
        if m.what == what:
            size = m.input_shape.split(",")[-1] if m.input_shape else m.resolution
            return (f"{m.model} {backend} infer b{m.batch_size} {size}px fp32 "
                    f"t{m.threads} cpu")  # fmt: skip
    return None


def load(paths: list[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The records, and their one machine; a second machine is refused."""
    records = [json.loads(p.read_text()) for p in paths]
    machines = {json.dumps(r["cpu"].get("model")) + str(sorted(r["cpu"]["flags"]))
                for r in records}  # fmt: skip
    if len(machines) > 1:
        names = ", ".join(
            f"{p.name}: {r['cpu'].get('model')}" for p, r in zip(paths, records, strict=True)
        )
        raise SystemExit(f"the records come from more than one machine ({names})")
    return records, records[0]["cpu"]


def gate_rows(tries: list[dict[str, Any]]) -> dict[str, dict[float, list[tuple[str, float]]]]:
    """Per cell and true change: each trial's verdict and its seconds (the command's over
    its cells: ab measures a member's cells together)."""
    out: dict[str, dict[float, list[tuple[str, float]]]] = {}
    for t in tries:
        for c in t.get("cells", []):
            per_cell = t["wall_s"] / len(t["cells"])
            out.setdefault(c["cell"], {}).setdefault(t["slowdown"], []).append(
                (c["verdict"], per_cell)
            )
    return out


def judged(trials: dict[float, list[tuple[str, float]]]) -> list[str]:
    """The targets this cell's tries miss, in words ([] when it meets them all)."""
    misses = []
    aa = [v for v, _ in trials.get(0.0, [])]
    if not aa:
        misses.append("no A/A tries")
    else:
        if aa.count("unchanged") / len(aa) < UNCHANGED_AT_LEAST:
            misses.append(f"A/A unchanged {aa.count('unchanged')}/{len(aa)}")
        if aa.count("regressed") / len(aa) > FALSE_ALARMS_AT_MOST:
            misses.append(f"A/A false alarms {aa.count('regressed')}/{len(aa)}")
    for change, floor in CAUGHT_AT_LEAST.items():
        caught = [v for v, _ in trials.get(change, [])]
        if caught and caught.count("regressed") / len(caught) < floor:
            misses.append(f"+{change:.0%} caught {caught.count('regressed')}/{len(caught)}")
    slowest = max((s for ts in trials.values() for _, s in ts), default=0.0)
    if slowest > CELL_LIMIT_S:
        misses.append(f"a cell took {slowest:.0f} s")
    return misses


def table(args: argparse.Namespace) -> tuple[str, list[str], list[list[str]], list[str]]:
    """The title, the columns, a row per cell, and the pooled rates' lines."""
    records, cpu = load([args.spreads, *args.gate, *args.bisect, *args.agreement])
    g, b = len(args.gate), len(args.bisect)
    spread, gates, bisected, agreed = (
        records[0],
        records[1 : 1 + g],
        records[1 + g : 1 + g + b],
        records[1 + g + b :],
    )
    allocators = list(spread["cells"])
    # One design: the tries without an arm (ab's defaults), or those of the arm asked for.
    every = [t for r in gates for t in r["tries"] if t.get("arm") == args.arm]
    trials = gate_rows(every)
    bisects: dict[str, list[dict[str, Any]]] = {}
    for t in (t for r in bisected for t in r["tries"]):
        if cell := member_cell(t["member"], t["backend"]):
            bisects.setdefault(cell, []).append(t)
    peers: dict[str, float] = {}
    for m in (m for r in agreed for m in r["members"]):
        for key, s in ((m["figures"] or {}).get("summary") or {}).items():
            cell = member_cell(m["what"], BACKEND_OF_PEER[key.split("/")[0]])
            if cell and "ratio" in s:
                peers[cell] = s["ratio"]
    title = f"issue 62's family on {cpu.get('model')}: spreads, gate, bisect, peers"
    cols = ["cell", *(f"{a}: in / between" for a in allocators), "A/A unchanged",
            "A/A regressed", "+5% caught", "+10% caught", "median s a cell", "bisect right",
            "stackcost / peer", "targets (point estimates)"]  # fmt: skip
    labels = list(dict.fromkeys([*spread["cells"][allocators[0]], *trials]))
    rows = []
    for label in labels:
        row = [label]
        for a in allocators:
            s = spread["cells"][a].get(label)
            row.append(f"{s['within']:.1%} / {s['between']:.1%}" if s else "—")
        mine = trials.get(label, {})

        def count(change: float, verdict: str, mine: dict = mine) -> str:
            vs = [v for v, _ in mine.get(change, [])]
            return f"{vs.count(verdict)}/{len(vs)}" if vs else "—"

        seconds = [s for ts in mine.values() for _, s in ts]
        tried = bisects.get(label, [])
        right = sum(1 for b in tried if b["kind"] == "right" and not b["unsure"])
        misses = judged(mine) if mine else ["no gate tries"]
        if len(tried) > right:
            misses.append(f"bisect right and sure {right}/{len(tried)}")
        if label in peers and abs(peers[label] - 1) > PEERS_WITHIN:
            misses.append(f"peer ratio {peers[label]:.3f}")
        row += [count(0.0, "unchanged"), count(0.0, "regressed"), count(0.05, "regressed"),
                count(0.10, "regressed"),
                f"{statistics.median(seconds):.0f}" if seconds else "—",
                f"{right}/{len(tried)}" if tried else "—",
                f"{peers[label]:.3f}" if label in peers else "—",
                "; ".join(misses) or "met"]  # fmt: skip
        rows.append(row)
    return title, cols, rows, pooled(every, [0.0, 0.05, 0.10])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spreads", type=Path, required=True, help="an allocator_family record")
    ap.add_argument("--gate", type=Path, nargs="+", required=True, help="gate_family records")
    ap.add_argument("--arm", help="the gate records' tries of this --arms arm (default: none)")
    ap.add_argument("--bisect", type=Path, nargs="*", default=[], help="bisect_family records")
    ap.add_argument("--agreement", type=Path, nargs="*", default=[],
                    help="agreement_family records")  # fmt: skip
    ap.add_argument("--markdown", action="store_true", help="a markdown table for a page")
    args = ap.parse_args()
    title, cols, rows, lines = table(args)
    if args.markdown:
        print("\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
                         *("| " + " | ".join(r) + " |" for r in rows), "", *lines]))  # fmt: skip
        return 0
    t = Table(title=title)
    for col in cols:
        t.add_column(col, justify="left" if col.startswith(("cell", "targets")) else "right")
    for r in rows:
        t.add_row(*r)
    console = Console(width=200)
    console.print(t)
    for line in lines:
        console.print(line, highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
