"""A plain three-layer perceptron: the floor of what a backend can do (no convolutions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from stackcost.cell import ModelRef


class MLP(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1, resolution: int = 28) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_channels * resolution * resolution, 512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.ReLU(),
            nn.Linear(256, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def mlp(ref: ModelRef, sizes: Mapping[str, int]) -> MLP:
    # ref.conv_bias does not apply: an MLP has no convolutions.
    return MLP(ref.num_classes, ref.in_channels, sizes["resolution"])
