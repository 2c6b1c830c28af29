"""torch.profiler breakdowns of small eager steps (CPU; the GPU path needs a device)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from stackcost.profile.breakdown import CPU_PARTS
from stackcost.profile.torch_profile import is_kernel, profile_step
from tests.profile.nets import conv_net


def _inference(net: nn.Module, x: torch.Tensor):
    def step():
        with torch.inference_mode():
            return net(x)

    return step


def test_a_known_sleep_is_attributed_to_overhead():
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    br = profile_step(lambda: (torch.mm(a, b), time.sleep(0.02)), iters=3, warmup=1)
    assert set(br.parts_ms) == {"kernels", "overhead"}
    assert br.parts_ms["overhead"] >= 18.0
    assert br.parts_ms["kernels"] < 2.0
    assert br.wall_ms >= 20.0
    assert sum(br.parts_ms.values()) + br.remainder_ms == pytest.approx(br.wall_ms)
    assert br.check()
    assert any(r.name == "aten::mm" for r in br.top_ops)


def test_a_conv_step_is_mostly_kernels():
    br = profile_step(_inference(conv_net(), torch.randn(1, 3, 64, 64)), iters=10)
    assert br.parts_ms["kernels"] > 0.5 * br.wall_ms, br.summary()
    assert any("conv" in r.name.lower() for r in br.top_ops[:3]), br.summary()
    assert br.top_ops == sorted(br.top_ops, key=lambda r: -r.self_ms)
    assert all(0 <= r.share <= 1 for r in br.top_ops)


def test_the_remainder_of_a_small_model_is_within_five_percent():
    br = profile_step(_inference(conv_net(), torch.randn(1, 3, 64, 64)), iters=10, top_n=3)
    assert br.check(0.05), br.summary()
    assert len(br.top_ops) == 3
    assert br.unprofiled_wall_ms is not None and br.unprofiled_wall_ms > 0


def test_a_training_step_profiles_backward_too():
    net = conv_net().train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    br = profile_step(step, iters=5, reference=False)
    assert br.unprofiled_wall_ms is None
    assert br.parts_ms["kernels"] > 0
    assert br.check(), br.summary()
    assert any("backward" in r.name for r in br.top_ops), br.summary()


def test_kernel_classification():
    assert is_kernel("aten::mkldnn_convolution")
    assert is_kernel("aten::addmm")
    assert not is_kernel("aten::empty")  # allocation is overhead
    assert not is_kernel("aten::view")  # metadata
    assert not is_kernel("aten::conv2d")  # a wrapper that dispatched further
    assert is_kernel("aten::relu", leaf=True)  # ... unless it did the work itself
    assert not is_kernel("stackcost.step")  # record_function ranges
    assert not is_kernel("autograd::engine::evaluate_function: AddmmBackward0")


def test_bad_arguments():
    with pytest.raises(ValueError, match="iters"):
        profile_step(lambda: None, iters=0)
    with pytest.raises(ValueError, match="device"):
        profile_step(lambda: None, device="tpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_gpu_parts_sum_to_the_step():
    net = conv_net().cuda()
    x = torch.randn(1, 3, 64, 64)

    def step():
        with torch.inference_mode():
            return net(x.cuda()).cpu()

    br = profile_step(step, iters=10, device="cuda")
    assert set(br.parts_ms) == {"device compute", "host<->device copies", "idle"}
    assert br.parts_ms["device compute"] > 0
    assert br.parts_ms["host<->device copies"] > 0
    assert br.check(), br.summary()


def test_frozen_torchscript_time_is_not_called_overhead():
    """Frozen TorchScript runs prepacked convolutions the profiler cannot see: their time
    sits in the graph frame and gets its own part, not "overhead"."""
    import warnings

    net = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU()).eval()
    x = torch.randn(2, 32, 64, 64)  # a few ms: the fixed remainder stays under 5%
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(net, x)))

    def step():
        with torch.no_grad():
            return scripted(x)

    b = profile_step(step, iters=5, reference=False)
    assert set(b.parts_ms) == {"kernels", "overhead", CPU_PARTS[2]}
    assert b.parts_ms[CPU_PARTS[2]] > b.parts_ms["overhead"]  # the convolution is in there
    assert b.check()
