"""Native (C++) rungs: sources shipped as package data, a build cache, and the SCW1 format.

Which zoo architectures the C++ programs (libtorch's `kind=nn`, onednn) define is one table,
architectures.json: each name maps to a family the programs build ("resnet", "mnist-cnn")
and that family's parameters. The programs hold no list of names: Python passes the
family and its parameters as key=values, so a new depth of a known family is one line there.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stackcost.cell import Cell

ARCHITECTURES = Path(__file__).resolve().parent / "architectures.json"


@cache
def architectures() -> dict[str, dict[str, Any]]:
    """The table: zoo name -> {"family": ..., its parameters}."""
    return json.loads(ARCHITECTURES.read_text())


def definition(cell: Cell) -> dict[str, Any] | None:
    """The C++ definition of the cell's network, or None when the programs have none (a
    user's factory never has one, whatever its name)."""
    if cell.model.is_factory:
        return None
    return architectures().get(cell.model.name)


def _key_value(value: Any) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def network_args(cell: Cell) -> dict[str, Any]:
    """The key=values that tell a program which network to build (run and train alike):
    the family and its parameters from the table, the zoo name as a label, and the shapes."""
    ref = cell.model
    found = definition(cell)
    if found is None:
        raise ValueError(f"no C++ definition of {ref.name}")
    return {
        "arch": ref.name,
        **{key: _key_value(value) for key, value in found.items()},
        "num_classes": ref.num_classes,
        "in_channels": ref.in_channels,
        "conv_bias": int(ref.conv_bias),
        "resolution": cell.resolution,
    }
