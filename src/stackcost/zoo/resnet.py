"""ResNets in plain torch.nn, layer for layer the torchvision architecture; the zoo entry
says which (its block and blocks per stage: resnet18 is basic 2-2-2-2).

ResNet-50 is v1.5 (stride on the 3x3 conv of the bottleneck), as in torchvision, so
parameter counts and state_dict keys match the reference implementation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from stackcost.cell import ModelRef


def _conv(cin: int, cout: int, kernel: int, stride: int = 1, bias: bool = False) -> nn.Conv2d:
    # "Same" padding for odd kernels; the stride alone sets the downsampling.
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=bias)


class BasicBlock(nn.Module):
    """Two 3x3 convs with an identity (or 1x1 projection) shortcut."""

    expansion = 1
    # `last_bn` is a property, which TorchScript would otherwise try to compile.
    __jit_unused_properties__ = ["last_bn"]

    def __init__(self, cin: int, width: int, stride: int = 1, bias: bool = False) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = _conv(cin, width, 3, stride, bias)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv(width, cout, 3, 1, bias)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _projection(cin, cout, stride, bias)

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        """The BN before the residual add (zeroed by the `zero-gamma` init).

        A property rather than a second attribute so the module isn't registered twice
        (which would duplicate its tensors in the state_dict).
        """
        return self.bn2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, v1.5), 1x1 expand, with a shortcut."""

    expansion = 4
    __jit_unused_properties__ = ["last_bn"]

    def __init__(self, cin: int, width: int, stride: int = 1, bias: bool = False) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = _conv(cin, width, 1, 1, bias)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv(width, width, 3, stride, bias)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv(width, cout, 1, 1, bias)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _projection(cin, cout, stride, bias)

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        """The BN before the residual add (zeroed by the `zero-gamma` init)."""
        return self.bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _projection(cin: int, cout: int, stride: int, bias: bool) -> nn.Sequential | None:
    # A 1x1 conv + BN only where the shape changes; otherwise the shortcut is identity.
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(_conv(cin, cout, 1, stride, bias), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        depths: tuple[int, ...],  # blocks per stage: four stages, as torchvision
        num_classes: int = 1000,
        in_channels: int = 3,
        conv_bias: bool = False,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=conv_bias)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        cin = 64
        stages = []
        for i, depth in enumerate(depths):
            width = 64 * 2**i
            blocks = []
            for j in range(depth):
                # The first block of every stage but the first halves the resolution.
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(block(cin, width, stride, conv_bias))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


BLOCKS: dict[str, type[BasicBlock | Bottleneck]] = {"basic": BasicBlock, "bottleneck": Bottleneck}


def resnet(ref: ModelRef, sizes: Mapping[str, int], block: str, depths: tuple[int, ...]) -> ResNet:
    """The workload builder, (ref, sizes, **the zoo entry's params) -> module; the resolution
    is unused (adaptive avgpool)."""
    return ResNet(BLOCKS[block], depths, ref.num_classes, ref.in_channels, ref.conv_bias)
