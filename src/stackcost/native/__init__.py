"""Native (C++) rungs: sources shipped as package data, a build cache, and the SCW1 format."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stackcost.cell import Cell


def network_args(cell: Cell) -> dict[str, Any]:
    """The key=values that tell a program which network to build (run and train alike)."""
    ref = cell.model
    return {
        "arch": ref.name,
        "num_classes": ref.num_classes,
        "in_channels": ref.in_channels,
        "conv_bias": int(ref.conv_bias),
        "resolution": cell.resolution,
    }
