"""`stackcost sweep [SPEC.yaml]`: a grid, resumable; flags override the file's axes."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from stackcost.api.catalog import SIZE_AXES
from stackcost.commands.axes import add_axis_args, axis_fields
from stackcost.commands.run import add_session_args, measure_and_show
from stackcost.errors import SpecError
from stackcost.runspec.grammar import split_list


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sweep", help="measure a grid from a YAML spec and/or flags (resumable)")
    p.add_argument("spec", nargs="?", help="YAML sweep spec (see examples/)")
    p.add_argument("--models", help="comma list of models (overrides the spec's)")
    p.add_argument(
        "--force",
        action="store_true",
        help="measure everything again in a new run instead of resuming",
    )
    add_axis_args(p, defaults=False)
    add_session_args(p)


def run(args: argparse.Namespace, console: Console) -> int:
    from stackcost.runspec.file import load_sweep, sweep_from_data

    overrides = axis_fields(args)
    for axis, values in overrides.pop("sizes", {}).items():  # a spec file's spelling
        overrides[SIZE_AXES[axis].plural] = values
    if args.models:
        overrides["models"] = split_list(args.models, "--models", "mlp,resnet18")
    if args.spec:
        spec = load_sweep(args.spec, overrides)
    elif "models" in overrides:
        spec = sweep_from_data(overrides, source="command line")
    else:
        raise SpecError("no sweep spec: give SPEC.yaml or at least --models (see examples/)")
    return measure_and_show(spec, args, console, resume=not args.force)
