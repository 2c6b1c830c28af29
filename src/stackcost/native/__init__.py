"""Native (C++) rungs: sources shipped as package data, a build cache, and the SCW1 format.

Which zoo models the C++ programs (libtorch's `kind=nn`, onednn) define follows from the zoo:
a model whose Workload names a family the programs build (FAMILIES) is defined, with that
entry's parameters (block, depths). The programs hold no list of names: Python passes the
family and its parameters as key=values, so a new depth of a known family is one zoo line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stackcost.cell import Cell

# The families common/protocol.hpp's parse_family accepts (stackcost/zoo/ has their torch code).
FAMILIES: tuple[str, ...] = ("resnet", "mnist-cnn")


def defined() -> list[str]:
    """The zoo names the programs define, for messages."""
    from stackcost.zoo import MODELS

    return sorted(name for name, w in MODELS.items() if w.family in FAMILIES)


def definition(cell: Cell) -> dict[str, Any] | None:
    """The C++ definition of the cell's network, {"family": ..., its parameters}, or None
    when the programs have none (a user's factory never has one, whatever its name)."""
    from stackcost.zoo import MODELS

    entry = None if cell.model.is_factory else MODELS.get(cell.model.name)
    if entry is None or entry.family not in FAMILIES:
        return None
    return {"family": entry.family, **entry.params}


def _key_value(value: Any) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)


def network_args(cell: Cell) -> dict[str, Any]:
    """The key=values that tell a program which network to build (run and train alike):
    the family and its parameters from the zoo, the zoo name as a label, and the shapes."""
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
