"""The model zoo: own definitions in plain torch.nn, behind a registry.

Every backend builds its model through `build_model`, so the same `ModelRef` gives the
same weights everywhere (`weights_digest` proves it). This module does not import torch
at the top level: the CLI lists and validates models without paying for it.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from stackcost.workload import Input, Workload
from stackcost.zoo.custom import (
    ZooError,
    build_custom,
    custom_workload,
    factory_workload,
    load_factory,
)
from stackcost.zoo.init import INIT_SCHEMES, apply_init

if TYPE_CHECKING:
    from torch import nn

    from stackcost.cell import ModelRef

__all__ = [
    "INIT_SCHEMES",
    "MODELS",
    "Workload",
    "ZooError",
    "apply_init",
    "build_custom",
    "build_model",
    "check_resolution",
    "factory_workload",
    "hf_entries",
    "is_hf_entry",
    "load_factory",
    "model_info",
    "weights_digest",
    "workload_of",
]


HF_BUILDER = "stackcost.zoo.hf:build"


def _image(
    name: str,
    builder: str,
    description: str,
    resolution: int,
    minimum: int,
    classes: int,
    channels: int,
    family: str,
    **params: object,
) -> Workload:
    return Workload(
        name, description, builder,
        inputs=(Input("input", ("batch", "in_channels", "resolution", "resolution")),),
        sizes={"resolution": resolution}, minimum={"resolution": minimum},
        domain="vision", num_classes=classes, in_channels=channels,
        params=params, family=family,
    )  # fmt: skip


def _resnet(
    name: str, description: str, block: Literal["basic", "bottleneck"], depths: tuple[int, ...]
) -> Workload:
    """A torchvision-layout ResNet: `depths` blocks per stage, basic or bottleneck."""
    # 32 px is the smallest input that still leaves a 1x1 map before the avgpool (stride 32).
    return _image(
        name, "stackcost.zoo.resnet:resnet", description, 224, 32, 1000, 3,
        "resnet", block=block, depths=depths,
    )  # fmt: skip


def _tokens(vocab: int, *extra: str) -> tuple[Input, ...]:
    """Token ids inside the vocabulary and a valid (all-ones) attention mask."""
    ids = Input("input_ids", ("batch", "seq_len"), "int64", "ids", vocab)
    mask = Input("attention_mask", ("batch", "seq_len"), "int64", "mask")
    more = tuple(Input(n, ("batch", "seq_len"), "int64", "ids", vocab) for n in extra)
    return (ids, mask, *more)


def _hf(
    name: str,
    model_type: str,
    description: str,
    domain: str,
    inputs: tuple[Input, ...],
    sizes: dict[str, int],
    minimum: dict[str, int] | None = None,
    maximum: dict[str, int] | None = None,
    **config: object,
) -> Workload:
    """A well-known Hugging Face architecture, built offline from its config (zoo/hf.py)."""
    return Workload(
        name, description, HF_BUILDER, inputs, sizes, minimum or {},
        maximum or {}, keyword=True, domain=domain, num_classes=0,
        params={"model_type": model_type, "config": config},
    )  # fmt: skip


def _decoder(name: str, description: str, vocab: int, **config: object) -> Workload:
    """A Llama-family decoder with its LM head, for generate (zoo/hf.py builds it)."""
    tokens = (
        Input("input_ids", ("batch", "prompt_len"), "int64", "ids", vocab),
        Input("attention_mask", ("batch", "prompt_len"), "int64", "mask"),
    )
    positions = int(config["max_position_embeddings"])  # type: ignore[call-overload]
    return Workload(
        name, description, HF_BUILDER, tokens, {"prompt_len": 128, "new_tokens": 64},
        maximum={"prompt_len": positions, "new_tokens": positions}, keyword=True,
        domain="generation", num_classes=0,
        params={"model_type": "llama", "config": {"vocab_size": vocab, **config},
                "head": "causal-lm"},
    )  # fmt: skip


# One entry per model; its file holds the module code. Adding a model is that file plus
# one entry here.
MODELS: dict[str, Workload] = {
    w.name: w
    for w in (
        _resnet("resnet18", "ResNet-18, basic blocks 2-2-2-2 (11.7M params)",
                "basic", (2, 2, 2, 2)),
        _resnet("resnet34", "ResNet-34, basic blocks 3-4-6-3 (21.8M params)",
                "basic", (3, 4, 6, 3)),
        _resnet("resnet50", "ResNet-50 v1.5, bottlenecks 3-4-6-3 (25.6M params)",
                "bottleneck", (3, 4, 6, 3)),
        _image("mnist-cnn", "stackcost.zoo.mnist_cnn:mnist_cnn",
               "Koehler's MNIST CNN: two 5x5 convs, two linear layers (21.8K params)",
               28, 28, 10, 1, "mnist-cnn"),
        _image("mlp", "stackcost.zoo.mlp:mlp",
               "MLP 512-256 on the flattened input, no convolutions (0.5M params at 28x28)",
               28, 1, 10, 1, "mlp"),
        _hf("bert-base", "bert", "BERT-base encoder, 12 layers, hidden 768 (110M params)",
            "nlp", _tokens(30522), {"seq_len": 128}, maximum={"seq_len": 512}),
        _hf("gpt2", "gpt2", "GPT-2 small decoder, 12 layers, full forward (124M params)",
            "decoder", _tokens(50257), {"seq_len": 128}, maximum={"seq_len": 1024}),
        _hf("t5-small", "t5", "T5-small encoder-decoder, 6+6 layers, d_model 512 (60M params)",
            "seq2seq", _tokens(32128, "decoder_input_ids"), {"seq_len": 128}),
        _hf("vit-b16", "vit", "ViT-B/16 vision transformer, 12 layers (86M params)",
            "vision-transformer",
            (Input("pixel_values", ("batch", 3, "resolution", "resolution")),),
            {"resolution": 224}, minimum={"resolution": 16}),
        _hf("wav2vec2-base", "wav2vec2",
            "wav2vec 2.0 base speech encoder, 1 s of 16 kHz audio (95M params)", "speech",
            (Input("input_values", ("batch", "samples")),),
            {"samples": 16000}, minimum={"samples": 400}),
        _decoder("llama-tiny", "Llama decoder for tests: 2 layers, hidden 64, GQA 4/2 heads, "
                 "vocab 256 (0.1M params)", 256, hidden_size=64, intermediate_size=128,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=2048),
        _decoder("llama-150m", "Llama decoder: 12 layers, hidden 768, GQA 12/4 heads, "
                 "vocab 32000 (124M params)", 32000, hidden_size=768, intermediate_size=2048,
                 num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                 max_position_embeddings=2048),
        _decoder("llama-1b", "Llama decoder: 16 layers, hidden 2048, GQA 32/8 heads, "
                 "vocab 32000 (1.1B params, 4.4 GB fp32)", 32000, hidden_size=2048,
                 intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                 num_key_value_heads=8, max_position_embeddings=2048),
        Workload(
            "dlrm-small", "DLRM-style recommender: 13 dense features, 8 sparse features "
            "as fixed-length bags (gather + sum), dot interactions (stackcost's own, 0.15M params)",
            "stackcost.zoo.dlrm:dlrm_small",
            inputs=(Input("dense", ("batch", 13)),
                    Input("sparse", ("batch", 8, 4), "int64", "ids", 1000)),
            domain="recommender", num_classes=0,
        ),
    )
}  # fmt: skip


def is_hf_entry(name: str) -> bool:
    """A zoo entry built by the Hugging Face adapter (takes -c and --head)."""
    return name in MODELS and MODELS[name].builder == HF_BUILDER


def decoder_entries() -> list[str]:
    """Zoo entries that generate (a decoder with its LM head)."""
    return [n for n, w in MODELS.items() if w.domain == "generation"]


def hf_entries() -> str:
    return ", ".join(n for n in MODELS if is_hf_entry(n))


def model_info(name: str) -> Workload:
    """Registry entry for a zoo name; KeyError if there is none."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r} (known: {', '.join(MODELS)})") from None


def check_resolution(name: str, resolution: int) -> str | None:
    """None if `name` runs at `resolution`, else a one-line reason.

    Models resolved in a child (factories, "hf:" types) are checked there, so they pass.
    """
    if ":" in name:
        return None
    if name not in MODELS:
        return f"unknown model {name!r} (known: {', '.join(MODELS)})"
    return MODELS[name].size_problem("resolution", resolution)


def workload_of(ref: ModelRef) -> Workload:
    """The workload `ref` names: a zoo entry, a Hugging Face model type ("hf:bert"), or a
    user's "package.module:ATTR". The last two import code, so they run in children, as
    does a zoo Hugging Face entry with -c or --head (its inputs and bounds follow the
    changed config); without them it is the registry's own entry."""
    if ref.is_hf or (is_hf_entry(ref.name) and (ref.config or ref.head)):
        from stackcost.zoo.hf import hf_workload

        return hf_workload(ref)
    if ref.is_factory:
        return custom_workload(ref)
    if ref.name not in MODELS:
        raise ZooError(f"unknown model {ref.name!r} (known: {', '.join(MODELS)})")
    return MODELS[ref.name]


def build_model(
    ref: ModelRef, sizes: Mapping[str, int] | int, workload: Workload | None = None
) -> nn.Module:
    """Construct, seed and initialize the model `ref` describes, in eval mode.

    `sizes` are the cell's size axes (an int is a resolution). Seeding right before
    construction makes the weights a function of `ref` and the sizes alone, whatever the
    caller did with the global RNG before.
    """
    import torch

    if isinstance(sizes, int):
        sizes = {"resolution": sizes}
    workload = workload or workload_of(ref)
    for axis, value in sizes.items():
        reason = workload.size_problem(axis, value)
        if reason is not None:
            raise ZooError(reason)
    builder = workload.builder
    if isinstance(builder, str):
        module_name, _, attr = builder.partition(":")
        builder = getattr(importlib.import_module(module_name), attr)
    torch.manual_seed(ref.seed)
    model = builder(ref, dict(sizes), **workload.params)
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
