"""The `stackcost` command: parse, dispatch to commands/, turn bad input into exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from stackcost.clip import one_line
from stackcost.commands import (
    ab,
    bisect,
    compare,
    env,
    history,
    listing,
    merge,
    peaks,
    report,
    run,
    suite,
    sweep,
    train,
)
from stackcost.commands import build as build_cmd
from stackcost.errors import SpecError
from stackcost.execute.machine_lock import MachineBusy

# sysexits' EX_TEMPFAIL: not bad input, try again later (another stackcost is measuring).
EXIT_BUSY = 75

COMMANDS = {
    "run": run,
    "sweep": sweep,
    "suite": suite,
    "report": report,
    "list": listing,
    "env": env,
    "peaks": peaks,
    "train": train,
    "compare": compare,
    "ab": ab,
    "history": history,
    "bisect": bisect,
    "build": build_cmd,
    "merge": merge,
}


class UsageError(Exception):
    """argparse's complaint, turned into our one-line error."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> Parser:
    from stackcost.version import __version__

    parser = Parser(prog="stackcost", description="Measure what each layer of the DL stack costs.")
    parser.add_argument("--version", action="version", version=f"stackcost {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Piped output gets a wide table rather than rich's 80-column default.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command].run(args, console)
    except (UsageError, SpecError) as exc:
        print(f"stackcost: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except MachineBusy as exc:
        print(f"stackcost: busy: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BUSY
    except KeyboardInterrupt:
        print("stackcost: interrupted; completed repetitions are stored", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
