"""A plain three-layer perceptron: the floor of what a backend can do (no convolutions)."""

from __future__ import annotations

import torch
from torch import nn


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


def mlp(
    num_classes: int = 10, in_channels: int = 1, conv_bias: bool = False, resolution: int = 28
) -> MLP:
    # conv_bias is part of the shared factory signature; an MLP has no convolutions.
    return MLP(num_classes, in_channels, resolution)
