"""`stackcost build`: compile the native backends' programs now rather than on first use."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("build", help="prebuild the native (C++) backends into the build cache")
    p.add_argument(
        "--backends",
        default="libtorch,torchscript-cpp,onednn",
        help=(
            "comma-separated native backends (default: the CPU ones; "
            "cudnn, the GPU one, on request)"
        ),
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="build cache directory (default: ~/.cache/stackcost/native, the one runs use)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.api.build import build_native
    from stackcost.errors import SpecError
    from stackcost.runspec.grammar import split_list

    names = split_list(args.backends, "--backends", "libtorch,onednn")
    try:
        result = build_native(names, args.cache_dir)
    except SpecError as exc:  # said on stdout, as a build's outcome, not as a usage error
        console.print(Text(str(exc), style="red"))
        return 2
    for failure in result.failed:
        console.print(Text(f"{', '.join(failure.backends)}: build failed", style="red"))
        console.print(failure.message, markup=False, highlight=False)
    for program in result.built:
        what = f"compiled in {program.seconds:.1f} s" if program.compiled else "cached"
        console.print(f"{', '.join(program.backends)}: {program.executable} ({what})", markup=False)
    return 0 if result.ok else 1
