from __future__ import annotations

import pytest
import torch
from torch import nn

from stackcost.cell import ModelRef
from stackcost.zoo import INIT_SCHEMES, MODELS, ZooError, apply_init, build_model


def ref(name: str, **kw: object) -> ModelRef:
    info = MODELS[name]
    return ModelRef(name=name, num_classes=info.num_classes, in_channels=info.in_channels, **kw)


def bns(model: nn.Module) -> list[nn.BatchNorm2d]:
    return [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]


def test_schemes() -> None:
    assert INIT_SCHEMES == ("torch-default", "kaiming-normal", "kaiming-uniform", "zero-gamma")
    with pytest.raises(ZooError, match="unknown init scheme"):
        apply_init(nn.Linear(2, 2), "xavier")


@pytest.mark.parametrize(("name", "blocks"), [("resnet18", 8), ("resnet50", 16)])
def test_zero_gamma_zeroes_exactly_the_last_bn_per_block(name: str, blocks: int) -> None:
    model = build_model(ref(name, init="zero-gamma"), 32)
    last = [m.last_bn for m in model.modules() if hasattr(m, "last_bn")]
    assert len(last) == blocks
    zeroed = [bn for bn in bns(model) if torch.all(bn.weight == 0)]
    assert len(zeroed) == blocks
    assert {id(bn) for bn in zeroed} == {id(bn) for bn in last}
    for bn in bns(model):
        if all(bn is not z for z in zeroed):
            assert torch.all(bn.weight == 1)
        assert torch.all(bn.bias == 0)


def test_zero_gamma_makes_residual_blocks_identity_like() -> None:
    # With every residual branch zeroed, a block without projection is relu(x).
    model = build_model(ref("resnet18", init="zero-gamma"), 32)
    block = model.layer1[0]
    x = torch.randn(1, 64, 8, 8)
    with torch.inference_mode():
        torch.testing.assert_close(block(x), torch.relu(x))


def test_kaiming_changes_conv_weights_not_linear() -> None:
    default = build_model(ref("resnet18"), 32)
    kaiming = build_model(ref("resnet18", init="kaiming-normal"), 32)
    assert not torch.equal(default.conv1.weight, kaiming.conv1.weight)
    # Same seed and linear layers left alone: the fc keeps its default init.
    assert torch.equal(default.fc.weight, kaiming.fc.weight)
    # fan_out = 64 * 7 * 7 for the stem: std sqrt(2 / 3136) ~ 0.0253.
    assert kaiming.conv1.weight.std().item() == pytest.approx((2 / 3136) ** 0.5, rel=0.05)


def test_kaiming_uniform_differs_from_normal() -> None:
    normal = build_model(ref("resnet18", init="kaiming-normal"), 32)
    uniform = build_model(ref("resnet18", init="kaiming-uniform"), 32)
    bound = (6 / (64 * 7 * 7)) ** 0.5
    assert uniform.conv1.weight.abs().max().item() <= bound
    assert normal.conv1.weight.abs().max().item() > bound


def test_kaiming_zeroes_conv_bias() -> None:
    model = build_model(ref("mnist-cnn", conv_bias=True, init="kaiming-normal"), 28)
    assert torch.all(model.conv1.bias == 0)
    assert torch.all(model.conv2.bias == 0)


@pytest.mark.parametrize("name", ["mnist-cnn", "mlp"])
def test_zero_gamma_equals_kaiming_normal_without_residual_blocks(name: str) -> None:
    a = build_model(ref(name, init="zero-gamma"), 28)
    b = build_model(ref(name, init="kaiming-normal"), 28)
    for va, vb in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(va, vb)


def test_torch_default_leaves_weights_alone() -> None:
    torch.manual_seed(0)
    layer = nn.Conv2d(3, 4, 3)
    before = layer.weight.clone()
    apply_init(layer, "torch-default")
    assert torch.equal(layer.weight, before)
