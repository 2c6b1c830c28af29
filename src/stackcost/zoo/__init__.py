"""The model zoo: own definitions in plain torch.nn, behind a registry.

Every backend builds its model through `build_model`, so the same `ModelRef` gives the
same weights everywhere (`weights_digest` proves it). This module does not import torch
at the top level: the CLI lists and validates models without paying for it.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stackcost.zoo.custom import ZooError, build_custom, load_factory
from stackcost.zoo.init import INIT_SCHEMES, apply_init

if TYPE_CHECKING:
    from torch import nn

    from stackcost.cell import ModelRef

__all__ = [
    "INIT_SCHEMES",
    "MODELS",
    "ModelInfo",
    "ZooError",
    "apply_init",
    "build_custom",
    "build_model",
    "check_resolution",
    "load_factory",
    "model_info",
    "weights_digest",
]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    factory: str  # "module:function", imported only when the model is built
    description: str
    default_resolution: int
    min_resolution: int
    default_num_classes: int
    default_in_channels: int


def _resnet(name: str, description: str) -> ModelInfo:
    # 32 px is the smallest input that still leaves a 1x1 map before the avgpool (stride 32).
    return ModelInfo(name, f"stackcost.zoo.resnet:{name}", description, 224, 32, 1000, 3)


MODELS: dict[str, ModelInfo] = {
    info.name: info
    for info in (
        _resnet("resnet18", "ResNet-18, basic blocks 2-2-2-2 (11.7M params)"),
        _resnet("resnet34", "ResNet-34, basic blocks 3-4-6-3 (21.8M params)"),
        _resnet("resnet50", "ResNet-50 v1.5, bottlenecks 3-4-6-3 (25.6M params)"),
        ModelInfo(
            "mnist-cnn",
            "stackcost.zoo.mnist_cnn:mnist_cnn",
            "Koehler's MNIST CNN: two 5x5 convs, two linear layers (21.8K params)",
            28,
            28,
            10,
            1,
        ),
        ModelInfo(
            "mlp",
            "stackcost.zoo.mlp:mlp",
            "MLP 512-256 on the flattened input, no convolutions (0.5M params at 28x28)",
            28,
            1,
            10,
            1,
        ),
    )
}


def model_info(name: str) -> ModelInfo:
    """Registry entry for a zoo name; KeyError if there is none."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r} (known: {', '.join(MODELS)})") from None


def check_resolution(name: str, resolution: int) -> str | None:
    """None if `name` runs at `resolution`, else a one-line reason.

    Custom factories ("module:factory") fix their own input shape, so they always pass.
    """
    if ":" in name:
        return None
    if name not in MODELS:
        return f"unknown model {name!r} (known: {', '.join(MODELS)})"
    minimum = MODELS[name].min_resolution
    if resolution < minimum:
        return f"resolution {resolution} is too small for {name} (minimum {minimum})"
    return None


def build_model(ref: ModelRef, resolution: int) -> nn.Module:
    """Construct, seed and initialize the model `ref` describes, in eval mode.

    Seeding right before construction makes the weights a function of `ref` alone,
    whatever the caller did with the global RNG before.
    """
    import torch

    if not ref.is_factory:
        if ref.name not in MODELS:
            raise ZooError(f"unknown model {ref.name!r} (known: {', '.join(MODELS)})")
        reason = check_resolution(ref.name, resolution)
        if reason is not None:
            raise ZooError(reason)
    torch.manual_seed(ref.seed)
    if ref.is_factory:
        model = build_custom(ref.name)
    else:
        module_name, _, attr = MODELS[ref.name].factory.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        model = factory(
            num_classes=ref.num_classes,
            in_channels=ref.in_channels,
            conv_bias=ref.conv_bias,
            resolution=resolution,
        )
    apply_init(model, ref.init)
    return model.eval()


def weights_digest(model: nn.Module) -> str:
    """First 16 hex chars of a sha256 over the state_dict tensors, in order.

    Dtype and shape go in with the bytes, so a cast or reshape changes the digest too.
    Names do not: a backend that re-wraps the module still matches.
    """
    import torch

    h = hashlib.sha256()
    for tensor in model.state_dict().values():
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]
