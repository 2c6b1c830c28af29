"""advise against brute force: does the budgeted search pick what measuring every cell in
full picks, how much time does it save, and did its screening ever prune the winner?

Each try runs, through the real CLI and into fresh stores, `stackcost advise` and the
brute-force grid (`stackcost run` over every cell, `--repeats 3`, the full stop rule),
one after the other, their order alternating try by try so a drift of the machine does
not always favour the same one. The brute-force best is chosen by advise's own rules
(advise.search: valid evidence, ok or unstable, meeting the bounds, best on the
objective; its status is recorded). Verdicts:
- `same`: advise picked the brute-force best;
- `tie`: another cell, within the gate's threshold of the best on the brute-force figures;
- `different`: beyond it.

    python benchmarks/advise_vs_brute.py --tries 3 --json benchmarks/results/advise_vs_brute.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from stackcost.advise.advice import Advice
from stackcost.advise.constraints import Constraints, violations
from stackcost.advise.evidence import Evidence, evidence_of
from stackcost.advise.search import USABLE, ranked
from stackcost.api import load_runs
from stackcost.env import collect
from stackcost.measure.paired import DEFAULT_THRESHOLD

STACKCOST = str(Path(sys.executable).parent / "stackcost")


def grid_flags(a: argparse.Namespace) -> list[str]:
    return [
        "--backends", a.backends, "--precision", a.precisions, "--batch-size", a.batch_sizes,
        "--threads", a.threads, "--resolution", str(a.resolution),
    ]  # fmt: skip


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.monotonic() - started


def brute_best(
    db: Path, bounds: Constraints, objective: str
) -> tuple[list[Evidence], Evidence | None]:
    """Every cell's evidence, and the best valid one that meets the bounds. Valid, not
    only `ok`: with a fixed 3 processes a cell whose processes differ by 4% is `unstable`
    (advise's finals add processes until they agree), and leaving such cells out made a
    cell at 2,000 samples/s the "best" beside one at 5,000."""
    run = load_runs(db, [])[0]
    cells = [evidence_of(c, bounds.percentile) for c in run.cells()]
    fit = ranked(
        [
            e
            for e in cells
            if e.status in USABLE
            and e.median_ms is not None
            and not violations(e.tail_ms, e.throughput, e.memory_bytes, bounds)
        ],
        objective,
    )
    return cells, (fit[0] if fit else None)


def verdict(pick: str | None, best: Evidence | None, cells: list[Evidence], objective: str) -> str:
    if pick is None or best is None:
        return "no answer" if pick is None else "brute force found none"
    if pick == best.label:
        return "same"
    # the pick may itself be the better cell on brute force's figures: a tie is "within
    # the threshold" either way, and "different" only when it is worse beyond it
    chosen = next((e for e in cells if e.label == pick), None)
    if chosen is None or chosen.value(objective) is None:
        return "different"
    a, b = best.value(objective), chosen.value(objective)
    behind = (b / a - 1) if objective != "throughput" else (a / b - 1)  # type: ignore[operator]
    return "tie" if behind <= DEFAULT_THRESHOLD else "different"


def fate(advice: Advice, best: Evidence | None) -> tuple[str, str]:
    """The phase and decision advise gave the brute-force best."""
    for e in advice.entries if best else []:
        if e.label == best.label:  # type: ignore[union-attr]
            return e.phase, e.decision
    return "", "not in advise's answer"


def one_try(a: argparse.Namespace, i: int, bounds: Constraints) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"advise-vs-brute-{i}-"))
    advise_argv = [
        STACKCOST, "advise", a.model, *grid_flags(a), "--objective", a.objective,
        "--latency-bound", a.latency_bound, "--budget", a.budget, "--quiet",
        "--db", str(work / "advise.db"), "--json", str(work / "advice.json"),
    ]  # fmt: skip
    brute_argv = [
        STACKCOST, "run", a.model, *grid_flags(a), "--repeats", "3", "--quiet",
        "--db", str(work / "brute.db"),
    ]  # fmt: skip
    order = ["advise", "brute"] if i % 2 == 0 else ["brute", "advise"]
    walls = {name: timed(advise_argv if name == "advise" else brute_argv) for name in order}
    advice = Advice.model_validate_json((work / "advice.json").read_text())
    cells, best = brute_best(work / "brute.db", bounds, a.objective)
    pick = advice.recommended.label if advice.recommended else None
    phase, decision = fate(advice, best)
    return {
        "try": i,
        "order": order,
        "advise_s": round(walls["advise"], 1),
        "brute_s": round(walls["brute"], 1),
        "saved": round(1 - walls["advise"] / walls["brute"], 3),
        "advise_pick": pick,
        "brute_best": best.label if best else None,
        "brute_best_status": best.status if best else None,
        "verdict": verdict(pick, best, cells, a.objective),
        "decided_by": advice.decided_by,
        "brute_best_in_advise": f"{phase}: {decision}",
        "winner_pruned_by_screening": phase == "screening" and not decision.startswith("kept"),
        "not_tried": advice.not_tried,
        "cells": len(cells),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--backends", default="eager,onnxruntime,openvino")
    p.add_argument("--precisions", default="fp32,int8-dyn,int8")
    p.add_argument("--batch-sizes", default="1,4,16")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--latency-bound", default="50ms")
    p.add_argument("--objective", default="throughput")
    p.add_argument("--budget", default="20m")
    p.add_argument("--tries", type=int, default=1)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    from stackcost.runspec.vocabulary import parse_bound_ms

    bounds = Constraints(latency_bound_ms=parse_bound_ms(a.latency_bound, "--latency-bound"))
    tries = []
    for i in range(a.tries):
        tries.append(one_try(a, i, bounds))
        print(json.dumps(tries[-1]), flush=True)
    env = collect()
    record = {
        "benchmark": "advise_vs_brute",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": env.get("cpu"), "python": env.get("python")},
        "args": {k: str(v) for k, v in vars(a).items() if k != "json"},
        "tries": tries,
    }
    if a.json:
        a.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
