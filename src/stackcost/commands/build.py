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
        help="comma-separated native backends (default: all of them)",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="build cache directory (default: ~/.cache/stackcost/native, the one runs use)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.backends import load_backend
    from stackcost.backends.native import NativeBackend
    from stackcost.native.build import BuildError, ensure_built

    targets: dict[str, list[str]] = {}
    for name in (n.strip() for n in args.backends.split(",") if n.strip()):
        try:
            backend = load_backend(name)
        except KeyError:
            console.print(Text(f"unknown backend {name!r}", style="red"))
            return 2
        if not isinstance(backend, NativeBackend):
            console.print(Text(f"{name} is not a native backend: nothing to build", style="red"))
            return 2
        targets.setdefault(backend.target, []).append(name)
    status = 0
    for target, names in targets.items():  # backends sharing a program build it once
        try:
            build = ensure_built(target, args.cache_dir)
        except BuildError as exc:
            console.print(Text(f"{', '.join(names)}: build failed", style="red"))
            console.print(str(exc), markup=False, highlight=False)
            status = 1
            continue
        what = f"compiled in {build.seconds:.1f} s" if build.compiled else "cached"
        console.print(f"{', '.join(names)}: {build.executable} ({what})", markup=False)
    return status
