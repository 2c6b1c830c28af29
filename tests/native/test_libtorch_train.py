"""`stackcost_libtorch train`: the program's own loop against eager PyTorch.

Same initial weights, same batches (the order rows Python writes), same ATen kernels, one
thread on both sides: losses and trained weights should agree to rounding (in practice
they are bit-identical; the bound leaves room for a kernel that reduces differently).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from stackcost.backends.native import epoch_records
from stackcost.native.tensors import read_tensors, write_tensors
from stackcost.native.training import train_args, write_train_files
from tests.native.train_reference import Problem, eager_losses, problem, run_program

RTOL = 1e-4

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread():
    """The program runs with the cell's threads (1): eager must reduce in the same order."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def max_rel(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def weights_rel(path: Path, expected: dict[str, torch.Tensor]) -> float:
    """Worst tensor's max |difference| / max |expected|, over the whole state_dict."""
    got = {k: torch.from_numpy(v) for k, v in read_tensors(path).items()}
    assert list(got) == list(expected)  # same names, in state_dict order
    return max(
        ((got[k] - v.float()).abs().max() / v.float().abs().max().clamp_min(1e-12)).item()
        for k, v in expected.items()
    )


def without_dropout(p: Problem) -> Problem:
    model = copy.deepcopy(p.model)
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.p = 0.0
    return dataclasses.replace(p, model=model)


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_sgd_matches_eager_losses_and_weights(native_build, tmp_path, schedule):
    p = problem("resnet18", resolution=32, batch=8, lr=0.01, momentum=0.9, schedule=schedule)
    final = tmp_path / "final.scw"
    answer = run_program(native_build.executable, p, tmp_path, max_steps=6, final_weights=final)
    expected, state = eager_losses(p, max_steps=6)
    assert len(answer["losses"]) == 6
    assert max_rel(answer["losses"], expected) <= RTOL
    assert weights_rel(final, state) <= RTOL
    assert answer["details"]["lr_schedule"] == schedule
    assert answer["details"]["optimizer"] == "sgd"


def test_mnist_cnn_without_dropout_matches_eager(native_build, tmp_path):
    p = problem("mnist-cnn", resolution=28, channels=1, batch=8, lr=0.05)
    answer = run_program(native_build.executable, p, tmp_path, dropout="off")
    expected, _ = eager_losses(without_dropout(p))
    assert len(answer["losses"]) == 12  # 2 epochs of 48 // 8
    assert max_rel(answer["losses"], expected) <= RTOL
    assert answer["details"]["dropout"] == "off"


def test_mnist_cnn_dropout_is_on_by_default(native_build, tmp_path):
    p = problem("mnist-cnn", resolution=28, channels=1, batch=8)
    answer = run_program(native_build.executable, p, tmp_path, max_steps=6)
    assert answer["details"]["dropout"] == "on"
    # Masks drawn in the program: the losses leave the dropout-free ones. One step can
    # land close by chance near ln(10); six steps of diverging weights do not.
    expected, _ = eager_losses(without_dropout(p), max_steps=6)
    assert max_rel(answer["losses"], expected) > 5e-3
    # Seeded (seed=0 by default): the same masks, so the same losses, on every run.
    (tmp_path / "again").mkdir()
    again = run_program(native_build.executable, p, tmp_path / "again", max_steps=6)
    assert again["losses"] == answer["losses"] and answer["details"]["seed"] == 0


def test_adam_matches_eager(native_build, tmp_path):
    p = problem("resnet18", resolution=32, batch=8, lr=1e-3, schedule="constant", optimizer="adam")
    answer = run_program(native_build.executable, p, tmp_path, max_steps=4)
    assert max_rel(answer["losses"], eager_losses(p, max_steps=4)[0]) <= RTOL
    assert answer["details"]["optimizer"] == "adam"


def test_epoch_records(native_build, tmp_path):
    # 50 // 8 = 6 steps (the partial batch of 2 dropped); 13 test samples = 8 + a partial 5.
    p = problem("mnist-cnn", resolution=28, channels=1, n=50, n_test=13, batch=8, epochs=2)
    answer = run_program(native_build.executable, p, tmp_path, dropout="off")
    assert answer["diverged"] == ""
    assert len(answer["losses"]) == 12 and len(answer["samples_ns"]) == 11
    assert answer["cold_ns"] > 0 and all(t > 0 for t in answer["samples_ns"])
    assert answer["peak_rss_bytes"] >= answer["baseline_rss_bytes"] > 0
    records = epoch_records(answer)
    assert [r.epoch for r in records] == [1, 2]
    for r, raw in zip(records, answer["epochs"], strict=True):
        assert r.complete and r.steps == 6 and r.train_samples == 48
        assert r.eval_samples == 13 and 0 <= r.eval_accuracy <= 1
        assert r.train_s >= r.step_s + r.loader_wait_s and r.eval_s > 0
        assert raw["step_ns"] > 0 and raw["loader_ns"] > 0
    losses = answer["losses"]
    assert records[0].train_loss == pytest.approx(sum(losses[:6]) / 6)

    # Evaluation, against eager's trained model in eval mode on the same test split.
    _, state = eager_losses(without_dropout(p))
    model = copy.deepcopy(p.model)
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        logits = model(p.test[0])
    eval_loss = F.cross_entropy(logits, p.test[1], reduction="sum").item()
    last = answer["epochs"][-1]
    assert last["eval_loss_sum"] == pytest.approx(eval_loss, rel=RTOL)
    assert last["eval_correct"] == int((logits.argmax(1) == p.test[1]).sum())


def test_max_steps_cuts_an_epoch_and_still_evaluates_it(native_build, tmp_path):
    p = problem("mnist-cnn", resolution=28, channels=1, batch=8, epochs=3)
    answer = run_program(native_build.executable, p, tmp_path, max_steps=8)
    steps = [(e["steps"], e["complete"], e["eval_samples"]) for e in answer["epochs"]]
    assert steps == [(6, True, 20), (2, False, 20)]
    assert len(answer["losses"]) == 8


def test_divergence_stops_without_evaluating(native_build, tmp_path):
    p = problem("mnist-cnn", resolution=28, channels=1, batch=8, lr=1e6, schedule="constant")
    answer = run_program(native_build.executable, p, tmp_path, divergence_factor=2)
    assert answer["diverged"].startswith("loss ")
    last = answer["epochs"][-1]
    assert not last["complete"] and last["eval_samples"] == 0
    bad = answer["losses"][-1]
    assert not math.isfinite(bad) or bad > 2 * answer["losses"][0]


# ---- bad input: exit 1, one line naming the problem -----------------------------------


def run_raw(executable: Path, p: Problem, workdir: Path, damage: Callable[[dict], None], **extra):
    """Write the problem's files, let `damage` spoil them, run the program as is."""
    files = write_train_files(workdir, p.model.state_dict(), p.train, p.test, p.orders)
    damage(files)
    args: dict[str, Any] = {**train_args(p.cell, files), **extra}
    cmd = [str(executable), "train", *(f"{k}={v}" for k, v in args.items())]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


def truncate_weights(files):
    data = files["weights"].read_bytes()
    files["weights"].write_bytes(data[: len(data) // 2])


def rename_fc_bias(files):
    state = {k: torch.from_numpy(v) for k, v in read_tensors(files["weights"]).items()}
    state["fc2.bias_renamed"] = state.pop("fc2.bias")
    write_tensors(files["weights"], state)


def reshape_fc_weight(files):
    state = {k: torch.from_numpy(v) for k, v in read_tensors(files["weights"]).items()}
    state["fc2.weight"] = state["fc2.weight"][:, :-1]
    write_tensors(files["weights"], state)


def edit_train_data(edit: Callable[[dict[str, torch.Tensor]], None]):
    def damage(files):
        data = {k: torch.from_numpy(v) for k, v in read_tensors(files["train_data"]).items()}
        edit(data)
        write_tensors(files["train_data"], data)

    return damage


def set_label(data):
    data["labels"][3] = 10.0


def drop_order(data):
    del data["order"]


def set_order(data):
    data["order"][1, 5] = 48.0


def flatten_images(data):
    data["images"] = data["images"].reshape(48, -1)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (truncate_weights, "truncated"),
        (rename_fc_bias, "weights file has no tensor fc2.bias"),
        (reshape_fc_weight, "shape mismatch for fc2.weight"),
        (
            edit_train_data(set_label),
            r"train_data labels\[3\] = 10 is not a class index in \[0, 10\)",
        ),
        (edit_train_data(drop_order), "train_data has no tensor order"),
        (edit_train_data(set_order), r"train_data order\[1\]\[5\] = 48 is not a sample index"),
        (edit_train_data(flatten_images), r"train_data images has shape \[48, 784\]"),
    ],
    ids=["truncated", "misnamed", "misshaped", "label", "no-order", "order-index", "images"],
)
def test_bad_input_fails_with_one_line(native_build, tmp_path, damage, message):
    p = problem("mnist-cnn", resolution=28, channels=1, batch=8)
    out = run_raw(native_build.executable, p, tmp_path, damage)
    assert out.returncode == 1, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert re.search(message, lines[0]), lines[0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"batch": 64}, "batch 64 is larger than the 48 training samples"),
        ({"optimizer": "lbfgs"}, "optimizer must be sgd|adam, not lbfgs"),
        ({"device": "tpu"}, "device must be cpu or cuda"),
        ({"lr": "fast"}, "lr=fast is not a number"),
    ],
)
def test_bad_keys_fail_with_one_line(native_build, tmp_path, extra, message):
    p = problem("mnist-cnn", resolution=28, channels=1, batch=8)
    out = run_raw(native_build.executable, p, tmp_path, lambda files: None, **extra)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), out.stderr


def test_cuda_without_a_gpu_says_so(native_build, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    p = problem("mnist-cnn", resolution=28, channels=1, batch=8)
    out = run_raw(native_build.executable, p, tmp_path, lambda files: None, device="cuda")
    assert out.returncode == 1
    assert "CUDA requested but torch::cuda::is_available() is false" in out.stderr
