from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from stackcost.cell import ModelRef
from stackcost.zoo import (
    MODELS as ALL_MODELS,
)
from stackcost.zoo import (
    ZooError,
    build_model,
    check_resolution,
    model_info,
    weights_digest,
)

# The image models (the zoo's transformers and DLRM have tests of their own).
MODELS = {n: w for n, w in ALL_MODELS.items() if "resolution" in w.sizes and w.num_classes}
# Smallest resolution each model supports keeps every forward pass cheap.
TINY = {name: max(info.minimum["resolution"], 28) for name, info in MODELS.items()}


def ref(name: str, **kw: object) -> ModelRef:
    info = MODELS[name]
    kw.setdefault("num_classes", info.num_classes)
    kw.setdefault("in_channels", info.in_channels)
    return ModelRef(name=name, **kw)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_registry() -> None:
    assert set(MODELS) == {"resnet18", "resnet34", "resnet50", "mnist-cnn", "mlp"}
    assert {"bert-base", "gpt2", "t5-small", "vit-b16", "wav2vec2-base", "dlrm-small"} <= set(
        ALL_MODELS
    )
    assert model_info("resnet50").minimum == {"resolution": 32}
    assert model_info("resnet50").builder == "stackcost.zoo.resnet:resnet"
    assert model_info("resnet50").family == "resnet"
    assert model_info("resnet50").params == {"block": "bottleneck", "depths": (3, 4, 6, 3)}
    assert model_info("bert-base").sizes == {"seq_len": 128}
    with pytest.raises(KeyError):
        model_info("vgg16")


def test_zoo_import_does_not_import_torch() -> None:
    # The CLI lists and validates models through the zoo without paying for torch.
    code = (
        "import sys, stackcost; base = 'torch' in sys.modules; "
        "import stackcost.zoo as z; z.check_resolution('resnet50', 16); z.model_info('mlp'); "
        "print('base' if base else 'zoo' if 'torch' in sys.modules else 'clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    if out.stdout.strip() == "base":
        pytest.skip("the stackcost package itself imports torch")
    assert out.stdout.strip() == "clean"


def test_check_resolution() -> None:
    assert check_resolution("resnet50", 32) is None
    assert check_resolution("resnet50", 16) == (
        "resolution 16 is too small for resnet50 (minimum 32 px)"
    )
    assert check_resolution("mnist-cnn", 27) is not None
    assert check_resolution("mlp", 1) is None
    assert check_resolution("pkg.mod:make", 1) is None
    assert "unknown model" in (check_resolution("nope", 224) or "")


def test_build_rejects_unknown_model_and_small_resolution() -> None:
    with pytest.raises(ZooError, match="unknown model"):
        build_model(ModelRef(name="nope"), 224)
    with pytest.raises(ZooError, match="too small for resnet18"):
        build_model(ref("resnet18"), 16)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("resnet18", 11_689_512), ("resnet34", 21_797_672), ("resnet50", 25_557_032)],
)
def test_resnet_parameter_counts_match_torchvision(name: str, expected: int) -> None:
    assert n_params(build_model(ref(name), 224)) == expected


def test_small_model_parameter_counts() -> None:
    # Koehler's net with bias: 260 + 5020 + 16050 + 510.
    assert n_params(build_model(ref("mnist-cnn", conv_bias=True), 28)) == 21_840
    assert n_params(build_model(ref("mnist-cnn"), 28)) == 21_840 - 10 - 20
    assert n_params(build_model(ref("mlp"), 28)) == 784 * 512 + 512 + 512 * 256 + 256 + 2570


@pytest.mark.parametrize("name", list(MODELS))
def test_output_shape_and_eval_mode(name: str) -> None:
    r = TINY[name]
    model = build_model(ref(name, num_classes=7, in_channels=2), r)
    assert not model.training
    with torch.inference_mode():
        out = model(torch.randn(2, 2, r, r))
    assert out.shape == (2, 7)


def test_mnist_cnn_log_softmax_and_larger_resolution() -> None:
    model = build_model(ref("mnist-cnn"), 28)
    with torch.inference_mode():
        out = model(torch.randn(2, 1, 28, 28))
    torch.testing.assert_close(out.exp().sum(dim=1), torch.ones(2))
    assert model.fc1.in_features == 320
    big = build_model(ref("mnist-cnn"), 64)
    assert big.fc1.in_features == 13 * 13 * 20
    with torch.inference_mode():
        assert big(torch.randn(1, 1, 64, 64)).shape == (1, 10)


def test_mlp_input_size_follows_resolution_and_channels() -> None:
    model = build_model(ref("mlp", in_channels=3), 5)
    assert model.layers[1].in_features == 3 * 5 * 5
    model = build_model(ref("mlp"), 1)
    assert model(torch.randn(1, 1, 1, 1)).shape == (1, 10)


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mnist-cnn"])
def test_conv_bias_toggle(name: str) -> None:
    for bias in (False, True):
        model = build_model(ref(name, conv_bias=bias), TINY[name])
        convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
        assert convs
        assert all((c.bias is not None) == bias for c in convs)


def test_resnet_in_channels_and_classes() -> None:
    model = build_model(ref("resnet18", num_classes=5, in_channels=1), 32)
    assert model.conv1.in_channels == 1
    assert model.fc.out_features == 5


@pytest.mark.parametrize("name", list(MODELS))
def test_seed_determines_weights(name: str) -> None:
    r = TINY[name]
    a = build_model(ref(name, seed=1), r)
    torch.rand(100)  # the global RNG state before building must not matter
    b = build_model(ref(name, seed=1), r)
    c = build_model(ref(name, seed=2), r)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb
        assert torch.equal(va, vb)
    assert weights_digest(a) == weights_digest(b)
    assert weights_digest(a) != weights_digest(c)
    assert any(
        not torch.equal(va, vc)
        for va, vc in zip(a.state_dict().values(), c.state_dict().values(), strict=True)
    )


def test_weights_digest_format_and_sensitivity() -> None:
    model = build_model(ref("mlp"), 4)
    digest = weights_digest(model)
    assert len(digest) == 16
    int(digest, 16)
    with torch.no_grad():
        model.layers[-1].bias[0] += 1
    assert weights_digest(model) != digest


def test_state_dict_has_no_duplicated_tensors() -> None:
    # last_bn must not register the BN a second time.
    model = build_model(ref("resnet18"), 32)
    assert not any("last_bn" in key for key in model.state_dict())
    assert "layer1.0.bn2.weight" in model.state_dict()


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", ["resnet18", "mnist-cnn", "mlp"])
def test_torchscript_compatible(name: str) -> None:
    r = TINY[name]
    model = build_model(ref(name), r)
    x = torch.randn(1, MODELS[name].in_channels, r, r)
    scripted = torch.jit.script(model)
    with torch.inference_mode():
        torch.testing.assert_close(scripted(x), model(x))
