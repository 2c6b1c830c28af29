"""A model with a slowdown knob, for calibrating the regression gate (gate_calibration.py).

BLOCKS identical Linear+ReLU blocks; STACKCOST_KNOB_SLOWDOWN=0.05 adds 5% more blocks
(21 instead of 20), so the injected slowdown is real compute of the same kind, in every
rung (eager, TorchScript, ONNX Runtime), not a sleep. Workers get a whitelisted
environment: pass the knob with --inherit-env STACKCOST_KNOB_SLOWDOWN (stored runs) or
--cand-env STACKCOST_KNOB_SLOWDOWN=0.05 (`stackcost ab`), and put benchmarks/ on
PYTHONPATH so the factory imports:

    PYTHONPATH=benchmarks stackcost run --model knob_model:model --input-shape 256 ...

Every factory takes `slowdown` too (a toy history's package passes it: bisect_family.py),
which wins over the environment. `attention` is the knob on transformer encoder layers.

`resnet18` is the same knob on a real model: the zoo's resnet18 (its seeded weights) at
RESOLUTION px, with a residual 3x3-then-1x1 convolution block after layer4 (512 channels at
2x2). At batch 1 this step is bound by reading its weights, not by its multiply-adds (a
conv of 6% of the multiply-adds at layer1 added 1-2%), so the block is sized by its share
of the parameters: WEIGHT_TO_TIME x slowdown of them. That factor was measured here
(2026-11-29, AMD EPYC 2 vCPU, eager, 2 threads, b1, the three models alternated in bursts
of 10 steps in one process for 45 s): nominal +5% and +10% read +4.5% and +9.5%. The
injected slowdown is still nominal; the calibration reports the ratios it measured.

    PYTHONPATH=benchmarks stackcost ab --model knob_model:resnet18 --input-shape 3,64,64 ...
"""

from __future__ import annotations

import os

import torch

BLOCKS = 20
WIDTH = 256
KNOB = "STACKCOST_KNOB_SLOWDOWN"
RESOLUTION = 64
# Parameters added per unit of time added, on resnet18 at b1 (the docstring says where from).
WEIGHT_TO_TIME = 1.4


def blocks(slowdown: float) -> int:
    """How many blocks give `slowdown` (0.05: 5% slower) relative to BLOCKS."""
    return round(BLOCKS * (1 + slowdown))


def knob(slowdown: float | None) -> float:
    """The slowdown asked for: the argument (a toy history's package passes it), else the
    STACKCOST_KNOB_SLOWDOWN of the environment (ab's --cand-env), else none."""
    return float(os.environ.get(KNOB, "0")) if slowdown is None else slowdown


def model(slowdown: float | None = None) -> torch.nn.Module:
    n = blocks(knob(slowdown))
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


def resnet18(slowdown: float | None = None) -> torch.nn.Module:
    from stackcost.runspec.run import model_ref
    from stackcost.zoo import build_model

    net = build_model(model_ref("resnet18"), RESOLUTION)
    slowdown = knob(slowdown)
    if slowdown:
        params = sum(p.numel() for p in net.parameters())
        channels = net.layer4[-1].conv2.out_channels
        per_width = channels * 10  # 3x3 in (9) and 1x1 out (1) per hidden channel
        width = max(1, round(WEIGHT_TO_TIME * slowdown * params / per_width))
        torch.manual_seed(0)
        block = _Knob(channels, width)
        # Small weights: the output stays near the network's, so verification still holds.
        for conv in (block.expand, block.project):
            torch.nn.init.normal_(conv.weight, std=1e-3)
        net.layer4 = torch.nn.Sequential(*net.layer4, block.eval())
    return net.eval()


# A plain stack of 3x3 convolutions with mid-sized activations (issue 62): at batch 8 and
# CONV_RESOLUTION px each activation is 8 x CONV_CHANNELS x 56 x 56 x 4 B = 3.2 MB, around
# the L2 of one core. Its speed is set by where a process's buffers land.
CONV_CHANNELS = 32
CONV_RESOLUTION = 56


def convstack(slowdown: float | None = None) -> torch.nn.Module:
    n = blocks(knob(slowdown))
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Conv2d(3, CONV_CHANNELS, 3, padding=1)]
    for _ in range(n - 1):
        layers += [torch.nn.ReLU(), torch.nn.Conv2d(CONV_CHANNELS, CONV_CHANNELS, 3, padding=1)]
    return torch.nn.Sequential(*layers).eval()


# Attention with its matmuls: BLOCKS transformer encoder layers (ATTN_HEADS heads, a
# feed-forward of twice the width) over ATTN_TOKENS tokens of ATTN_WIDTH; +5% = one more
# layer. At batch 8 the scores are 8 x 4 x 64 x 64 x 4 B = 0.5 MB a layer.
ATTN_WIDTH = 128
ATTN_TOKENS = 64
ATTN_HEADS = 4


def attention(slowdown: float | None = None) -> torch.nn.Module:
    n = blocks(knob(slowdown))
    torch.manual_seed(0)
    layers = [
        torch.nn.TransformerEncoderLayer(
            ATTN_WIDTH, ATTN_HEADS, 2 * ATTN_WIDTH, dropout=0.0, batch_first=True
        )
        for _ in range(n)
    ]
    return torch.nn.Sequential(*layers).eval()


# The input of one sample, per factory (benchmarks that build the models themselves).
INPUT_SHAPES = {
    "model": (WIDTH,),
    "resnet18": (3, RESOLUTION, RESOLUTION),
    "convstack": (3, CONV_RESOLUTION, CONV_RESOLUTION),
    "attention": (ATTN_TOKENS, ATTN_WIDTH),
}
