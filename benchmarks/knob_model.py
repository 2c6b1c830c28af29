"""A model with a slowdown knob, for calibrating the regression gate (gate_calibration.py).

BLOCKS identical Linear+ReLU blocks; STACKCOST_KNOB_SLOWDOWN=0.05 adds 5% more blocks
(21 instead of 20), so the injected slowdown is real compute of the same kind, in every
rung (eager, TorchScript, ONNX Runtime), not a sleep. Workers get a whitelisted
environment: pass the knob with --inherit-env STACKCOST_KNOB_SLOWDOWN (stored runs) or
--cand-env STACKCOST_KNOB_SLOWDOWN=0.05 (`stackcost ab`), and put benchmarks/ on
PYTHONPATH so the factory imports:

    PYTHONPATH=benchmarks stackcost run --model knob_model:model --input-shape 256 ...

`resnet18` is the same knob on a real model: the zoo's resnet18 (its seeded weights) at
RESOLUTION px, with a residual 3x3-then-1x1 convolution block after layer1 whose width is
chosen so that its multiply-adds are `slowdown` of the network's. Multiply-adds are not
time, so the injected slowdown is nominal; the calibration reports the ratios it measured.

    PYTHONPATH=benchmarks stackcost ab --model knob_model:resnet18 --input-shape 3,64,64 ...
"""

from __future__ import annotations

import os

import torch

BLOCKS = 20
WIDTH = 256
KNOB = "STACKCOST_KNOB_SLOWDOWN"
RESOLUTION = 64


def blocks(slowdown: float) -> int:
    """How many blocks give `slowdown` (0.05: 5% slower) relative to BLOCKS."""
    return round(BLOCKS * (1 + slowdown))


def model() -> torch.nn.Module:
    n = blocks(float(os.environ.get(KNOB, "0")))
    layers: list[torch.nn.Module] = []
    for _ in range(n):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


class _Knob(torch.nn.Module):
    """x + conv1x1(relu(conv3x3(x))): `width` hidden channels of real convolution work."""

    def __init__(self, channels: int, width: int) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(channels, width, 3, padding=1, bias=False)
        self.project = torch.nn.Conv2d(width, channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(torch.relu(self.expand(x)))


def conv_macs(net: torch.nn.Module, x: torch.Tensor) -> int:
    """Multiply-adds of every convolution and linear layer in one forward of `x`."""
    total = 0

    def count(module: torch.nn.Module, _inputs: object, out: torch.Tensor) -> None:
        nonlocal total
        if isinstance(module, torch.nn.Conv2d):
            k = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
            total += out.numel() * k
        elif isinstance(module, torch.nn.Linear):
            total += out.numel() * module.in_features

    hooks = [m.register_forward_hook(count) for m in net.modules()]
    try:
        with torch.no_grad():
            net(x)
    finally:
        for h in hooks:
            h.remove()
    return total


def resnet18() -> torch.nn.Module:
    from stackcost.spec.run import model_ref
    from stackcost.zoo import build_model

    net = build_model(model_ref("resnet18"), RESOLUTION)
    slowdown = float(os.environ.get(KNOB, "0"))
    if slowdown:
        x = torch.zeros(1, 3, RESOLUTION, RESOLUTION)
        macs = conv_macs(net, x)
        side = RESOLUTION // 4  # layer1's feature map: the stem's stride 2 and max-pool
        channels = net.layer1[-1].conv2.out_channels
        per_width = side * side * channels * 10  # 3x3 in (9) and 1x1 out (1) per channel
        width = max(1, round(slowdown * macs / per_width))
        torch.manual_seed(0)
        knob = _Knob(channels, width)
        # Small weights: the output stays near the network's, so verification still holds.
        for conv in (knob.expand, knob.project):
            torch.nn.init.normal_(conv.weight, std=1e-3)
        net.layer1 = torch.nn.Sequential(*net.layer1, knob.eval())
    return net.eval()
