"""Named weight-initialization schemes, applied to a model after construction.

The scheme is part of a cell's identity (`ModelRef.init`), so every backend sees weights
from the same recipe. This module imports torch lazily so the names can be listed and
validated without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stackcost.zoo.custom import ZooError

if TYPE_CHECKING:
    from torch import nn

INIT_SCHEMES: tuple[str, ...] = ("torch-default", "kaiming-normal", "kaiming-uniform", "zero-gamma")


def apply_init(model: nn.Module, scheme: str) -> nn.Module:
    """Re-initialize `model` in place with `scheme` and return it.

    - ``torch-default``: leave the initialization each layer did at construction.
    - ``kaiming-normal``: He-normal (fan_out, relu) conv weights, zero conv biases,
      BatchNorm/GroupNorm weight 1 and bias 0; linear layers keep PyTorch's default.
    - ``kaiming-uniform``: the same with He-uniform conv weights.
    - ``zero-gamma``: kaiming-normal, then the last BN gamma of every residual block set
      to 0 so each block starts as the identity (Goyal et al., 2017). Residual blocks are
      found by their ``last_bn`` attribute; on models without residual blocks (mnist-cnn,
      mlp, most custom models) this is exactly kaiming-normal.
    """
    if scheme not in INIT_SCHEMES:
        raise ZooError(f"unknown init scheme {scheme!r} (choose from {', '.join(INIT_SCHEMES)})")
    if scheme == "torch-default":
        return model

    import torch
    from torch import nn

    conv_init = nn.init.kaiming_uniform_ if scheme == "kaiming-uniform" else nn.init.kaiming_normal_
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
                conv_init(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm)) and m.affine:
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if scheme == "zero-gamma":
            for m in model.modules():
                # getattr, not isinstance: custom residual blocks can opt in by the same marker.
                last_bn = getattr(m, "last_bn", None)
                if isinstance(last_bn, nn.modules.batchnorm._BatchNorm) and last_bn.affine:
                    nn.init.zeros_(last_bn.weight)
    return model
