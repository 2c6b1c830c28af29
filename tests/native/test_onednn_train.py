"""`stackcost_onednn train`: oneDNN primitives train like eager from the same weights and batches.

The tiny problems (train_reference.problem: batch 8 at 32x32) are badly conditioned after a
few steps: layer4's BatchNorms normalize 8 values per channel, and the BN shifts' gradients
(small sums of larger terms) carry the largest relative errors. Eager fp32 itself drifts from
eager fp64 there (resnet18, lr 0.01: 3.6e-5 at step 3, 3% at step 4, 11% at step 5), so no
f32 implementation can match eager to 1e-3 beyond that. The comparisons stay in the
well-conditioned window, or (resnet34/50's first update) measure oneDNN's distance from an
fp64 eager run against eager fp32's own.

Measured on this machine (oneDNN 2.6.3, avx512): resnet18 losses within 3e-6 of eager for 3
steps at lr 0.01 and 6 steps at lr 0.001, final weights within 5e-5 (max error over each
tensor's max); mnist-cnn (dropout off) within 2e-7 for 12 steps, weights 2e-7. First step:
resnet34 loss 1e-6, update 1.2e-5 from fp64 (eager fp32: 1.2e-5); resnet50 loss 8e-6,
update 2.4% from fp64 (eager fp32: 1.2%; its kernels alone move single tensors by 30%).
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from stackcost import zoo
from stackcost.backends.native import epoch_records
from stackcost.native.tensors import read_tensors, write_tensors
from stackcost.native.training import train_args, write_train_files
from tests.native.train_reference import Problem, eager_losses, problem, run_program

pytestmark = pytest.mark.slow


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def tensor_errors(got: dict, ref: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per tensor: max |got - ref| over max |ref| (the same names, all of them)."""
    assert set(got) == set(ref)
    errors = {}
    for name, r in ref.items():
        g = torch.as_tensor(got[name]).double()
        assert tuple(g.shape) == tuple(r.shape), name
        errors[name] = float((g - r.double()).abs().max() / r.double().abs().max().clamp_min(1e-12))
    return errors


def in_float64(p: Problem) -> Problem:
    """The same problem in fp64: how far eager fp32 itself is from the exact answer."""
    return Problem(
        cell=p.cell,
        model=copy.deepcopy(p.model).double(),
        train=(p.train[0].double(), p.train[1]),
        test=p.test,
        orders=p.orders,
    )


def eager_eval(p: Problem, state: dict[str, torch.Tensor]) -> tuple[float, int]:
    """Summed cross-entropy and correct predictions of `state` in eval mode on the test set."""
    model = copy.deepcopy(p.model)
    model.load_state_dict(state)
    model.eval()
    images, labels = p.test
    with torch.no_grad():
        logits = model(images)
    return float(F.cross_entropy(logits, labels, reduction="sum")), int(
        (logits.argmax(1) == labels).sum()
    )


def mnist_problem(conv_bias: bool = False, **kw) -> Problem:
    """mnist-cnn whose Dropout modules are identities: what `dropout=off` trains."""
    p = problem(arch="mnist-cnn", resolution=28, channels=1, **kw)
    if conv_bias:
        ref = p.cell.model.model_copy(update={"conv_bias": True})
        p.cell = p.cell.model_copy(update={"model": ref})
        p.model = zoo.build_model(ref, 28).train()
    for m in p.model.modules():
        if isinstance(m, torch.nn.Dropout | torch.nn.Dropout2d):
            m.p = 0.0
    return p


def _avx512() -> bool:
    """AVX-512 kernels for oneDNN: the CPU has them (the environment record's flags) and
    ONEDNN_MAX_CPU_ISA does not cap oneDNN below them."""
    from stackcost.env import cpu_info

    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "")).upper()
    narrowed = cap in ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")
    return "avx512f" in cpu_info()["flags"] and not narrowed


# Seen on an AMD EPYC (avx2 only): step 1 matches eager fp64 as closely as eager fp32 does,
# but at step 2 one ReLU input of layer2.0's output (n=7, c=100, h=3, w=1; fp64: -2.3e-5)
# lands on the other side of zero (+4e-6), moved there by ordinary 1e-5 differences in the
# step-1 weights. From there layer2.0.bn2.bias is 5.7% off and step 3's loss 5.3e-3; with
# that one mask element flipped, fp64 agrees to 7e-5. Not a defect of the oneDNN level or of
# avx2 kernels: eager fp32 itself flips it with channels_last at 2 threads. A near-tie of
# this tiny problem (batch 8, random data), which the Intel Xeon's kernels happened to miss.
AVX2_TRAINING_GAP = pytest.mark.xfail(
    not _avx512(),
    reason="a near-zero ReLU input at step 2 flips sign under this CPU's kernels (near-tie)",
    strict=False,
)


@pytest.fixture
def exe(onednn_build) -> Path:
    return onednn_build.executable


# ---- agreement with eager -------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet18_eager() -> tuple[Problem, list[float], list[dict[str, torch.Tensor]]]:
    """resnet18 at lr 0.01 and eager's first three steps on it, trained once for the tests
    that compare with them: the problem, the losses and the state after each step."""
    p = problem(lr=0.01, momentum=0.9)
    states: list[dict[str, torch.Tensor]] = []
    losses, _ = eager_losses(p, max_steps=3, snapshots=states)
    return p, losses, states


@AVX2_TRAINING_GAP
def test_resnet18_first_steps_match_eager(exe, tmp_path, resnet18_eager):
    p, ref, _ = resnet18_eager
    answer = run_program(exe, p, tmp_path, max_steps=3)
    assert len(answer["losses"]) == 3
    for got, want in zip(answer["losses"], ref, strict=True):
        assert rel(got, want) <= 1e-4, (answer["losses"], ref)


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_adam_matches_eager(exe, tmp_path, schedule):
    # torch.optim.Adam's defaults in its single-tensor CPU order and precision, on mnist-cnn
    # where the two sides' gradients agree to ~1e-7 (SGD above): what is left is the update.
    # (On resnet18 Adam's first step moves every weight by ~lr * sign(grad), so a gradient
    # that is ~0 on both sides but of another sign moves the losses by 1e-4 after one step.)
    p = mnist_problem(lr=1e-3, schedule=schedule, optimizer="adam")
    final = tmp_path / "final.scw"
    ref, state = eager_losses(p)
    answer = run_program(exe, p, tmp_path, dropout="off", final_weights=final)
    assert answer["details"]["optimizer"] == "adam" and len(answer["losses"]) == 12
    for got, want in zip(answer["losses"], ref, strict=True):
        assert rel(got, want) <= 1e-5, (answer["losses"], ref)
    errors = tensor_errors(read_tensors(final), state)
    assert max(errors.values()) <= 1e-5, sorted(errors.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.parametrize("steps", [1, pytest.param(2, marks=AVX2_TRAINING_GAP)])
def test_resnet18_final_weights_match_eager(exe, tmp_path, steps, resnet18_eager):
    p, _, states = resnet18_eager
    state = states[steps - 1]
    answer = run_program(exe, p, tmp_path, max_steps=steps, final_weights=tmp_path / "final.scw")
    got = read_tensors(tmp_path / "final.scw")
    errors = tensor_errors(got, state)  # parameters and BN buffers, all 122 tensors
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] <= 1e-3, (worst, errors[worst])
    assert "layer2.0.downsample.1.running_var" in errors
    assert float(got["bn1.num_batches_tracked"]) == steps
    # The epoch it stopped in is evaluated, in eval mode with the running statistics.
    loss_sum, correct = eager_eval(p, state)
    epoch = answer["epochs"][-1]
    assert epoch["eval_samples"] == len(p.test[1]) and not epoch["complete"]
    assert rel(epoch["eval_loss_sum"], loss_sum) <= 1e-3
    assert abs(epoch["eval_correct"] - correct) <= 1  # a near-tie may flip


def update_errors(got: dict, ref: dict[str, torch.Tensor], start: dict) -> dict[str, float]:
    """Per float tensor: max |got - ref| over max |ref - start|, the update's own scale."""
    errors = {}
    for name, r in ref.items():
        if not r.is_floating_point():
            continue
        step = r.double() - start[name].double()
        if float(step.abs().max()) > 0:
            diff = torch.as_tensor(got[name]).double() - r.double()
            errors[name] = float(diff.abs().max() / step.abs().max())
    return errors


@pytest.mark.parametrize("batch", [16, 32])
def test_resnet18_first_update_matches_eager_at_larger_batches(exe, tmp_path, batch):
    """Batch 16 and 32 (where oneDNN could pick other layouts than at 8) update like eager.

    Measured on this machine: final weights 5e-6 / 6e-6 from eager's (as batch 8), the
    worst tensor's update 6e-4 at both batches (batch 8: 5e-4), about eager fp32's own
    distance from fp64. Up to batch 64 and at 64x64 every activation and gradient stays
    nChw16c, the same primitives as at batch 8. A gradient summed twice (binary_add of a
    buffer with itself) moves the updates by 10x their size.

    The comparison is per tensor relative to its update, which a layout or accumulation bug
    moves by O(1). It is exposed to one kind of legitimate f32 difference: a ReLU input
    within rounding of zero (e.g. bn2 + shortcut = -1.3864465 + 1.3864458) lands on the
    other side in one implementation, and that single element's gradient, dropped or kept,
    moves a few tensors' updates by 1-12% (seen on digits at batch 16/32, random seed 1 at
    batch 32; eager with oneDNN's ReLU masks then agrees to 2e-4..1e-3). These seeds have no
    such near-tie; if a kernel change makes one appear, pick another seed.
    """
    p = problem(batch=batch, n=2 * batch, n_test=batch, lr=0.01, momentum=0.9)
    _, state = eager_losses(p, max_steps=1)
    run_program(exe, p, tmp_path, max_steps=1, final_weights=tmp_path / "final.scw")
    got = read_tensors(tmp_path / "final.scw")
    errors = tensor_errors(got, state)
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] <= 1e-3, (worst, errors[worst])
    updates = update_errors(got, state, p.model.state_dict())
    worst = max(updates, key=updates.__getitem__)
    assert updates[worst] <= 1e-2, (worst, updates[worst])
    assert len(updates) == 102  # every parameter and running statistic moved


def test_resnet18_six_steps_at_a_small_lr(exe, tmp_path):
    p = problem(lr=0.001, momentum=0.9)
    states: list[dict[str, torch.Tensor]] = []
    ref, _ = eager_losses(p, max_steps=6, snapshots=states)
    answer = run_program(exe, p, tmp_path, max_steps=6)
    for got, want in zip(answer["losses"], ref, strict=True):
        assert rel(got, want) <= 1e-3, (answer["losses"], ref)
    state = states[2]  # after step 3, as a run of max_steps=3 ends
    run_program(exe, p, tmp_path, max_steps=3, final_weights=tmp_path / "final.scw")
    errors = tensor_errors(read_tensors(tmp_path / "final.scw"), state)
    assert max(errors.values()) <= 1e-3


@pytest.mark.parametrize("arch", ["resnet34", "resnet50"])
def test_deeper_resnets_first_step_as_close_as_eager_fp32(exe, tmp_path, arch):
    """The first update's distance from fp64 is within a few times eager fp32's own.

    resnet50's first gradient is ill-conditioned at this size (eager fp32 is 1.3% from fp64
    in L2 over all parameters, single tensors up to 30% depending on the kernels), so the
    update is compared over the whole model rather than tensor by tensor.
    """
    p = problem(arch=arch, lr=0.01, momentum=0.9)
    ref32, state32 = eager_losses(p, max_steps=1)
    _, state64 = eager_losses(in_float64(p), max_steps=1)
    answer = run_program(exe, p, tmp_path, max_steps=1, final_weights=tmp_path / "final.scw")
    assert rel(answer["losses"][0], ref32[0]) <= 1e-4
    got = read_tensors(tmp_path / "final.scw")
    start = p.model.state_dict()

    def update_error(state) -> float:  # L2 over every parameter and buffer, relative
        num = sum(
            float(((torch.as_tensor(state[k]).double() - w) ** 2).sum()) for k, w in state64.items()
        )
        den = sum(float(((w - start[k].double()) ** 2).sum()) for k, w in state64.items())
        return math.sqrt(num / den)

    assert update_error(got) <= 4 * update_error(state32) + 1e-6


@pytest.mark.parametrize("conv_bias", [False, True])
def test_mnist_without_dropout_matches_eager(exe, tmp_path, conv_bias):
    p = mnist_problem(conv_bias)  # 2 epochs of 6 steps, cosine schedule
    ref, state = eager_losses(p)
    answer = run_program(exe, p, tmp_path, dropout="off", final_weights=tmp_path / "final.scw")
    assert answer["details"]["dropout"] == "off"
    assert len(answer["losses"]) == len(ref) == 12
    for got, want in zip(answer["losses"], ref, strict=True):
        assert rel(got, want) <= 1e-5
    errors = tensor_errors(read_tensors(tmp_path / "final.scw"), state)
    assert max(errors.values()) <= 1e-5
    loss_sum, correct = eager_eval(p, state)
    last = answer["epochs"][-1]
    assert rel(last["eval_loss_sum"], loss_sum) <= 1e-5 and last["eval_correct"] == correct


def test_mnist_dropout_draws_from_the_seed(exe, tmp_path):
    p = mnist_problem()
    off = run_program(exe, p, tmp_path, max_steps=2, dropout="off")["losses"]
    on = run_program(exe, p, tmp_path, max_steps=2)["losses"]
    again = run_program(exe, p, tmp_path, max_steps=2, seed=0)["losses"]
    other = run_program(exe, p, tmp_path, max_steps=2, seed=1)["losses"]
    assert all(math.isfinite(x) for x in on)
    assert on == again and on != other and on[0] != off[0]


# ---- the answer -----------------------------------------------------------------------


def test_epoch_records(exe, tmp_path):
    p = mnist_problem(n=50, n_test=20, batch=8, epochs=2)  # 6 steps, 2 samples dropped
    answer = run_program(exe, p, tmp_path)
    records = epoch_records(answer)
    assert [r.epoch for r in records] == [1, 2]
    for r in records:
        assert r.complete and r.steps == 6 and r.train_samples == 48
        assert r.eval_samples == 20 and 0 <= r.eval_accuracy <= 1  # batches 8, 8, 4
        assert r.step_s > 0 and r.train_s >= r.step_s + r.loader_wait_s * 0.99
    assert records[0].train_loss == pytest.approx(sum(answer["losses"][:6]) / 6)
    assert answer["cold_ns"] > 0 and len(answer["samples_ns"]) == 11
    assert answer["diverged"] == ""
    d = answer["details"]
    assert d["optimizer"] == "sgd" and d["schedule"] == "cosine"
    assert d["primitives_per_step"] == d["forward_primitives"] + d["backward_primitives"] > 0
    assert d["reorders_per_step"] >= d["weight_reorders_per_step"] >= 0
    assert "use_global_stats" in d["eval_bn"]

    stopped = run_program(exe, p, tmp_path, max_steps=4)
    (only,) = epoch_records(stopped)
    assert not only.complete and only.steps == 4 and only.eval_samples == 20


def test_divergence_stops_the_run(exe, tmp_path):
    p = mnist_problem(lr=100.0)
    answer = run_program(exe, p, tmp_path, dropout="off")
    assert answer["diverged"].startswith("loss ")
    last = answer["epochs"][-1]
    assert not last["complete"] and last["eval_samples"] == 0
    assert len(answer["losses"]) == sum(e["steps"] for e in answer["epochs"])


# ---- bad input ------------------------------------------------------------------------


def run_files(
    exe: Path,
    tmp_path: Path,
    p: Problem,
    state=None,
    train=None,
    orders=None,
    rewrite=None,
    **extra,
):
    """Write (possibly broken) files for `p` and run the program; the finished process."""
    files = write_train_files(
        tmp_path,
        p.model.state_dict() if state is None else state,
        p.train if train is None else train,
        p.test,
        p.orders if orders is None else orders,
    )
    if rewrite is not None:
        rewrite(files)
    args = {**train_args(p.cell, files), **extra}
    cmd = [str(exe), "train", *(f"{k}={v}" for k, v in args.items())]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _without(state: dict, name: str) -> dict:
    return {k: v for k, v in state.items() if k != name}


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing weight", "weights file has no tensor conv2.weight"),
        ("extra weight", "weights file has a tensor the model lacks: extra"),
        ("misshaped weight", "shape mismatch for fc2.bias"),
        ("missing order", "train_data has no tensor order"),
        ("order out of range", "train_data order index 48 at position 3 outside [0, 48)"),
        ("label out of range", "train_data label 10 at position 0 outside [0, 10)"),
        ("batch above N", "batch 64 exceeds the 48 training samples"),
        ("lbfgs", "optimizer must be sgd|adam, not lbfgs"),
    ],
)
def test_bad_input_fails_with_one_line(exe, tmp_path, case, expected):
    p = mnist_problem()
    state = p.model.state_dict()
    kw: dict = {}
    if case == "missing weight":
        kw["state"] = _without(state, "conv2.weight")
    elif case == "extra weight":
        kw["state"] = {**state, "extra": torch.zeros(1)}
    elif case == "misshaped weight":
        kw["state"] = {**state, "fc2.bias": torch.zeros(11)}
    elif case == "missing order":
        images, labels = p.train
        kw["rewrite"] = lambda files: write_tensors(
            files["train_data"], {"images": images, "labels": labels.float()}
        )
    elif case == "order out of range":
        orders = p.orders.clone()
        orders[0, 3] = 48
        kw["orders"] = orders
    elif case == "label out of range":
        labels = p.train[1].clone()
        labels[0] = 10
        kw["train"] = (p.train[0], labels)
    elif case == "batch above N":
        kw["batch"] = 64
    elif case == "lbfgs":
        kw["optimizer"] = "lbfgs"
    out = run_files(exe, tmp_path, p, **kw)
    assert out.returncode == 1, out.stdout
    assert out.stderr.strip().startswith("error: ") and len(out.stderr.strip().splitlines()) == 1
    assert expected in out.stderr, out.stderr


def test_weights_are_taken_in_torch_order(exe, tmp_path):
    """final_weights holds the state_dict's names in its order, in torch's layouts."""
    p = mnist_problem()
    run_program(exe, p, tmp_path, max_steps=1, final_weights=tmp_path / "final.scw")
    got = read_tensors(tmp_path / "final.scw")
    assert list(got) == list(p.model.state_dict())
    fresh = zoo.build_model(p.cell.model, 28)
    fresh.load_state_dict({k: torch.as_tensor(v) for k, v in got.items()})  # names and shapes
