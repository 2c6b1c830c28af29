"""The `stackcost` command: parse, dispatch to commands/, turn bad input into exit 2."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from stackcost.clip import one_line
from stackcost.commands import (
    ab,
    advise,
    bisect,
    compare,
    env,
    heldout,
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
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left

COMMANDS = {
    "run": run,
    "sweep": sweep,
    "suite": suite,
    "report": report,
    "list": listing,
    "env": env,
    "peaks": peaks,
    "train": train,
    "heldout": heldout,
    "compare": compare,
    "ab": ab,
    "advise": advise,
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


# argparse reads a value such as -5ms after a flag as a flag of its own.
NEEDS_VALUE = re.compile(r"argument (\S+): expected one argument")
NEGATIVE = re.compile(r"-[0-9.]")


def negative_values_attached(argv: Sequence[str], message: str) -> list[str] | None:
    """`argv` with `--flag -5ms` written as `--flag=-5ms`, when argparse refused it for want
    of a value; parsed again, the value reaches its own check, which names it and what
    is allowed. None when the message is about something else."""
    match = NEEDS_VALUE.match(message)
    if not match:
        return None
    spellings = match[1].split("/")
    for i, token in enumerate(argv[:-1]):
        if token in spellings and NEGATIVE.match(argv[i + 1]):
            return [*argv[:i], f"{token}={argv[i + 1]}", *argv[i + 2 :]]
    return None


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = build_parser()
    try:
        return parser.parse_args(argv)
    except UsageError as exc:
        attached = negative_values_attached(argv, str(exc))
        if attached is None:
            raise
        return parser.parse_args(attached)


def main(argv: Sequence[str] | None = None) -> int:
    # Piped output gets a wide table rather than rich's 80-column default.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        args = parse(list(sys.argv[1:] if argv is None else argv))
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
    except BrokenPipeError:  # `stackcost report --format csv | head`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # quiet at exit
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a bug, not bad input: one line, and the traceback kept aside
        print(internal_error(exc), file=sys.stderr)
        return 1


def internal_error(exc: Exception) -> str:
    """The one line for an exception nothing expected; its traceback goes to a file the
    line names, so the report has it without the terminal getting a page of it. Every
    completed repetition was committed as it finished; nothing more is written to a store."""
    import tempfile
    import traceback

    where = Path(tempfile.gettempdir()) / f"stackcost-crash-{os.getpid()}.txt"
    try:
        where.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        kept = f"with the traceback in {where}"
    except OSError:
        kept = "with the command that raised it"
    what = one_line(f"{type(exc).__name__}: {exc}", 160)
    return (
        f"stackcost: internal error: {what} (a bug in stackcost, not in your input: "
        f"please report it to the stackcost maintainers {kept})"
    )


if __name__ == "__main__":
    sys.exit(main())
