"""`stackcost list models|backends`: what exists, and why a backend can't run here."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("list", help="list models or backends, and why one is unavailable")
    p.add_argument("what", choices=["models", "backends"])


def run(args: argparse.Namespace, console: Console) -> int:
    # Descriptions and reasons are Text: "pip install 'stackcost[onnx]'" is not markup.
    table = Table(header_style="bold")
    if args.what == "models":
        from stackcost import zoo

        for col in ("model", "default input", "min res", "classes", "description"):
            table.add_column(col)
        for info in zoo.MODELS.values():
            table.add_row(
                info.name,
                f"{info.default_in_channels}×{info.default_resolution}²",
                str(info.min_resolution),
                str(info.default_num_classes),
                Text(info.description),
            )
        table.caption = Text(
            f"init schemes: {', '.join(zoo.INIT_SCHEMES)}; or --model package.module:factory"
        )
    else:
        from stackcost.backends import REGISTRY, load_backend

        for col in (
            "backend",
            "available",
            "modes",
            "devices",
            "precisions",
            "description / reason",
        ):
            table.add_column(col)
        for name in REGISTRY:
            b = load_backend(name)
            a, caps = b.available(), b.capabilities
            table.add_row(
                name,
                Text("yes", style="green") if a.ok else Text("no", style="red"),
                ",".join(sorted(caps.modes)),
                ",".join(sorted(caps.devices)),
                ",".join(sorted(caps.precisions)),
                Text(b.description if a.ok else a.reason),
            )
    console.print(table)
    return 0
