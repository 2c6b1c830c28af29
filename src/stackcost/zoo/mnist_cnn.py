"""The small MNIST CNN from Gregor Koehler's "MNIST Handwritten Digit Recognition in PyTorch"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from stackcost.cell import ModelRef

MIN_RESOLUTION = 28


def _fc1_in_features(resolution: int) -> int:
    # Two valid 5x5 convs, each followed by a 2x2 max-pool, 20 channels out: 320 at 28x28.
    side = ((resolution - 4) // 2 - 4) // 2
    return side * side * 20


class MnistCNN(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 1,
        conv_bias: bool = False,
        resolution: int = MIN_RESOLUTION,
    ) -> None:
        super().__init__()
        if resolution < MIN_RESOLUTION:
            raise ValueError(
                f"resolution {resolution} is too small for mnist-cnn (minimum {MIN_RESOLUTION})"
            )
        self.conv1 = nn.Conv2d(in_channels, 10, kernel_size=5, bias=conv_bias)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5, bias=conv_bias)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(_fc1_in_features(resolution), 50)
        self.fc1_drop = nn.Dropout()
        self.fc2 = nn.Linear(50, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = torch.flatten(x, 1)
        x = self.fc1_drop(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def mnist_cnn(ref: ModelRef, sizes: Mapping[str, int]) -> MnistCNN:
    return MnistCNN(ref.num_classes, ref.in_channels, ref.conv_bias, sizes["resolution"])
