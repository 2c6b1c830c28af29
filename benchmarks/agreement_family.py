"""Do stackcost's figures agree with the peers on every cell of the family (issue 62, item 5)?

For each member of family.py and each of its backends, agreement.py's bursts design: per
block a fresh pair of warm workers, stackcost's paced worker and the peer's harness,
alternating bursts, both with the same threads and the same allocator (--allocator, steady
by default: the per-process draw of glibc's thresholds averaged out, as the gate does). The
peers: torch.utils.benchmark.Timer on eager's step and on the step inductor compiled, a
bare ONNX Runtime loop, and OpenVINO's sync loop as benchmark_app runs it. PASS when the
ratio (the geometric mean over blocks) is within 3%.

    PYTHONPATH=benchmarks python benchmarks/agreement_family.py [--blocks 6] \
        [--allocator steady] [--block-s 2] [--json PATH]

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from family import FAMILY
from stackcost.allocators import ALLOCATORS
from stackcost.env import cpu_info

HERE = Path(__file__).resolve().parent
# The peer that times what each backend runs (agreement.PEERS).
PEER_OF = {"eager": "torch", "inductor": "inductor", "onnxruntime": "onnxruntime",
           "openvino": "openvino"}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--allocator", default="steady", choices=list(ALLOCATORS))
    ap.add_argument("--block-s", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--members", help="comma list of family.py indices (default: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 160)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.perf_counter()
    members: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="stackcost-agreement-family-") as tmp:
        chosen = [int(i) for i in args.members.split(",")] if args.members else range(len(FAMILY))
        for i in chosen:
            member = FAMILY[i]
            out = Path(tmp) / f"{i}.json"
            peers = ",".join(PEER_OF[b] for b in member.backends)
            argv = [
                sys.executable, str(HERE / "agreement.py"), "--model", member.model,
                *(["--input-shape", member.input_shape] if member.input_shape else []),
                *(["--resolution", str(member.resolution)] if member.resolution else []),
                "--batch-sizes", str(member.batch_size), "--threads", str(member.threads),
                "--peers", peers, "--allocator", args.allocator, "--blocks", str(args.blocks),
                "--block-s", str(args.block_s), "--seed", str(args.seed + i), "--json", str(out),
            ]  # fmt: skip
            console.print(f"[bold]{member.what}[/] ({time.perf_counter() - started:.0f} s)")
            proc = subprocess.run(argv, env=env, capture_output=True, text=True)
            found = json.loads(out.read_text()) if out.exists() else None
            if found is None:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                console.print(f"[red]no figures[/]: {' / '.join(tail)}")
            members.append({"what": member.what, "argv": argv[2:], "figures": found})
    table = Table(title=f"stackcost / peer over the family, allocator {args.allocator}, "
                  f"{args.blocks} blocks of {args.block_s:g} s (this machine)")  # fmt: skip
    for col in ("member", "peer", "backend", "ratio", "95% CI over blocks", "blocks", "verdict"):
        table.add_column(col, justify="right" if col in ("ratio", "blocks") else "left")
    passed = total = 0
    for m in members:
        summary = (m["figures"] or {}).get("summary", {})
        for key, s in summary.items():
            peer = key.split("/")[0]
            backend = next(b for b, p in PEER_OF.items() if p == peer)
            total += 1
            if "ratio" not in s:
                table.add_row(m["what"], peer, backend, "—", "—", "0", "NO DATA")
                continue
            passed += bool(s["pass"])
            table.add_row(m["what"], peer, backend, f"{s['ratio']:.4f}",
                          f"{s['ci_low']:.4f}–{s['ci_high']:.4f}",
                          f"{s['blocks_with_both']}/{s['blocks']}",
                          "PASS" if s["pass"] else "FAIL")  # fmt: skip
    console.print(table)
    wall = time.perf_counter() - started
    console.print(f"{passed}/{total} cells within ±3%; wall {wall:.0f} s")
    if args.json:
        record = {
            "date": time.strftime("%Y-%m-%d"),
            "cpu": cpu_info(),
            "settings": {k: str(v) for k, v in vars(args).items() if k != "json"},
            "members": members,
            "passed": passed,
            "cells": total,
            "wall_s": wall,
        }
        args.json.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
