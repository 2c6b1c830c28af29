"""`stackcost merge A.db B.db ... -o all.db`: stores from several machines in one, for one
report that compares the machines side by side (see stackcost/merge.py)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.text import Text


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="merge stores from several machines into one (each run keeps its environment)",
    )
    p.add_argument("stores", nargs="+", metavar="DB", help="stores to merge, read only")
    p.add_argument("-o", "--output", required=True, help="the merged store (created, or added to)")


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.api import merge

    merged = merge(args.stores, args.output)
    for source, ids in merged.added.items():
        dupes = merged.duplicates.get(source, [])
        line = Text(f"{source}: {len(ids)} runs added")
        if dupes:
            line.append(f", {len(dupes)} already there (taken once)", style="dim")
        console.print(line)
    for note in merged.differing:
        console.print(Text(note, style="yellow"))
    console.print(
        Text.assemble(f"{args.output}: ", (f"{merged.total} runs merged", "bold"), " · "),
        Text(f"stackcost report --db {args.output} --all compares the machines"),
    )
    return 0
