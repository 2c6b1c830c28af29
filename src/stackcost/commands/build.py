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
    from stackcost.backends import check_name, load_backend
    from stackcost.errors import SpecError
    from stackcost.native.build import BuildError
    from stackcost.runspec.grammar import split_list

    backends = []
    for name in split_list(args.backends, "--backends", "libtorch,onednn"):
        try:
            check_name(name)
        except SpecError as exc:
            console.print(Text(str(exc), style="red"))
            return 2
        backends.append((name, load_backend(name)))
    status = 0
    built: dict[str, tuple[list[str], Any]] = {}  # executable -> (backends, first build)
    failed: dict[str, list[str]] = {}  # message -> backends (sharing a program: retried)
    for name, backend in backends:
        try:
            build = backend.build(args.cache_dir)
        except BuildError as exc:
            failed.setdefault(str(exc), []).append(name)
            status = 1
            continue
        if build is None:
            console.print(Text(f"{name} has nothing to build (not a native backend)", style="red"))
            return 2
        # Backends sharing a program built it once: the later ones found it cached.
        built.setdefault(str(build.executable), ([], build))[0].append(name)
    for message, names in failed.items():
        console.print(Text(f"{', '.join(names)}: build failed", style="red"))
        console.print(message, markup=False, highlight=False)
    for executable, (names, build) in built.items():
        what = f"compiled in {build.seconds:.1f} s" if build.compiled else "cached"
        console.print(f"{', '.join(names)}: {executable} ({what})", markup=False)
    return status
