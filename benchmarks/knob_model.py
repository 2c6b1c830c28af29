"""A model with a slowdown knob, for calibrating the regression gate (gate_calibration.py).

BLOCKS identical Linear+ReLU blocks; STACKCOST_KNOB_SLOWDOWN=0.05 adds 5% more blocks
(21 instead of 20), so the injected slowdown is real compute of the same kind, in every
rung (eager, TorchScript, ONNX Runtime), not a sleep. Workers get a whitelisted
environment: pass the knob with --inherit-env STACKCOST_KNOB_SLOWDOWN (stored runs) or
--cand-env STACKCOST_KNOB_SLOWDOWN=0.05 (`stackcost ab`), and put benchmarks/ on
PYTHONPATH so the factory imports:

    PYTHONPATH=benchmarks stackcost run --model knob_model:model --input-shape 256 ...
"""

from __future__ import annotations

import os

import torch

BLOCKS = 20
WIDTH = 256
KNOB = "STACKCOST_KNOB_SLOWDOWN"


def blocks(slowdown: float) -> int:
    """How many blocks give `slowdown` (0.05: 5% slower) relative to BLOCKS."""
    return round(BLOCKS * (1 + slowdown))


def model() -> torch.nn.Module:
    n = blocks(float(os.environ.get(KNOB, "0")))
    layers: list[torch.nn.Module] = []
    for _ in range(n):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)
