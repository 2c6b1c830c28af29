import copy

import pytest
import torch
from torch import nn

from stackcost.cell import ModelRef
from stackcost.measure.flops import arithmetic_intensity, count_work
from stackcost.zoo import build_model


def test_resnet50_is_about_4_1_gmacs_per_image():
    model = build_model(ModelRef(name="resnet50"), 224)
    work = count_work(model, torch.randn(1, 3, 224, 224))
    # Published: 4.1 GMACs (torchvision's v1.5 counts 4.09); FlopCounterMode is 2 per MAC.
    assert work.flops / 2 == pytest.approx(4.1e9, rel=0.05)
    assert set(work.by_op) == {"convolution", "addmm"}
    assert sum(work.by_op.values()) == work.flops
    assert work.mode == "infer" and "FlopCounterMode" in work.method
    assert "ESTIMATED" in work.bytes_method


def test_tiny_conv_linear_by_hand():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    work = count_work(model, torch.randn(2, 3, 10, 10))
    # conv: 2 images x 8x8x8 outputs x 3*3*3 MACs each; linear: 2 x 512 x 10 MACs (the bias
    # add is not a multiply-add and counts nothing). 2 FLOPs per MAC.
    conv = 2 * 2 * (8 * 8 * 8) * (3 * 3 * 3)
    linear = 2 * 2 * 512 * 10
    assert work.by_op == {"convolution": conv, "addmm": linear}
    assert work.flops == conv + linear == 75776


def test_train_counts_about_three_times_infer_and_leaves_the_model_alone():
    model = build_model(ModelRef(name="resnet18"), 64)
    before = copy.deepcopy(model.state_dict())
    x = torch.randn(2, 3, 64, 64)
    infer = count_work(model, x)
    train = count_work(model, x, mode="train")
    # backward ~2x forward (grads of inputs and of weights); less for the first conv,
    # whose input needs no grad.
    assert 2.5 <= train.flops / infer.flops <= 3.5
    assert "convolution_backward" in train.by_op and train.mode == "train"
    assert not model.training
    assert all(p.grad is None for p in model.parameters())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # BN running stats too


def test_bytes_of_a_linear_layer_by_hand():
    # The rule: each op reads its tensor inputs and writes its outputs once; views count 0.
    # Linear without bias is aten.t(weight) (a view: 0) then aten.mm(x, w.t()).
    layer = nn.Linear(64, 32, bias=False)
    work = count_work(layer, torch.randn(4, 64))
    x, w, y = 4 * 64 * 4, 64 * 32 * 4, 4 * 32 * 4  # float32: 4 bytes per element
    assert work.bytes == x + w + y == 9728
    assert work.flops == 2 * 4 * 64 * 32
    assert arithmetic_intensity(work) == pytest.approx(16384 / 9728)


def test_views_move_no_bytes():
    work = count_work(nn.Flatten(), torch.randn(2, 3, 4, 4))
    assert work.bytes == 0 and work.flops == 0
    assert arithmetic_intensity(work) == float("inf")


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="mode"):
        count_work(nn.Linear(2, 2), torch.randn(1, 2), mode="eval")
