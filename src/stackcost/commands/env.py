"""`stackcost env`: the environment record stored with every run, as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console


def add_parser(sub: Any) -> None:
    sub.add_parser("env", help="print the environment record stored with every run")


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.api import environment

    print(json.dumps(environment(), indent=2))
    return 0
