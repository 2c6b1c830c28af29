"""Training at the TensorFlow, Keras and JAX levels: the run's recipe rebuilt in Keras,
every level from eager's initial weights, its first losses agreeing with eager's."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from stackcost.api import load_runs
from stackcost.cell import TrainConfig
from stackcost.cli import main
from stackcost.report.frames.train import agreement, eager_twin
from stackcost.runspec.run import model_ref
from stackcost.zoo import build_model
from tests.conftest import needs

pytestmark = needs("keras", reason="the tf/jax extras are not installed")
LEVELS = ("tf", "keras", "jax")  # tf-xla and keras-xla differ from tf and keras by a flag


def _factory(**train) -> SimpleNamespace:
    return SimpleNamespace(train=TrainConfig(**train), total_steps=40)


def test_the_cosine_schedule_is_torchs_step_for_step():
    pytest.importorskip("tensorflow")
    from stackcost.backends.keras_training import keras_optimizer, learning_rate

    factory = _factory(lr=0.05)
    rate, optimizer = learning_rate(factory), keras_optimizer(factory)
    torch_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.05, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(torch_opt, 40)
    for step in range(40):
        keras_rate = float(rate(step))  # the rate used by step + 1
        assert math.isclose(keras_rate, torch_opt.param_groups[0]["lr"], rel_tol=1e-5, abs_tol=1e-9)
        torch_opt.step()
        schedule.step()
    assert type(optimizer).__name__ == "SGD" and math.isclose(optimizer.momentum, 0.9)


def test_adam_and_a_constant_rate_take_torchs_settings():
    pytest.importorskip("tensorflow")
    from stackcost.backends.keras_training import keras_optimizer, recipe

    optimizer = keras_optimizer(_factory(optimizer="adam", lr=1e-3, schedule="constant"))
    assert type(optimizer).__name__ == "Adam"
    assert math.isclose(float(optimizer.learning_rate), 1e-3, rel_tol=1e-6)
    record = recipe(optimizer)
    assert record["optimizer_config"]["epsilon"] == 1e-8  # torch's, not Keras' 1e-7
    assert record["lr_schedule_impl"] == "constant"


def test_converted_weights_are_copies_of_the_torch_parameters():
    """JAX on CPU may alias a numpy buffer: a torch parameter changed after conversion
    (eager training in the same process) must not change the Keras model."""
    pytest.importorskip("tensorflow")
    from stackcost.backends.keras_models import to_keras

    model = build_model(model_ref("resnet18"), 32)
    keras_model = to_keras(model, "resnet", (3, 32, 32))
    before = [np.array(w) for w in keras_model.get_weights()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
        for b in model.buffers():
            b.add_(1)
    after = keras_model.get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_bf16_computes_in_bfloat16_over_float32_weights_and_hands_back_fp32():
    import os

    from stackcost.env import onednn_bf16_capped

    pytest.importorskip("tensorflow")
    if onednn_bf16_capped(cap := os.environ.get("ONEDNN_MAX_CPU_ISA")):
        # TensorFlow's oneDNN ops choose bf16 by the CPU's flags; capped, oneDNN cannot
        # create them. A CPU without bf16 runs this test (on Eigen's kernels).
        pytest.skip(f"CPU feature hidden: oneDNN capped at {cap} has no bf16 kernels")
    from stackcost.backends.keras_models import nhwc, precision_used, to_keras

    model = build_model(model_ref("resnet18"), 32).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        expected = model(x).numpy()
    keras_model = to_keras(model, "resnet", (3, 32, 32), "mixed_bfloat16")
    used = precision_used(keras_model)
    assert used["compute_dtype"] == ["bfloat16"] and used["variable_dtype"] == ["float32"]
    got = keras_model(nhwc(x.numpy()), training=False)
    assert np.asarray(got).dtype == np.float32
    err = np.abs(np.asarray(got) - expected).max() / np.abs(expected).max()
    assert 0 < err <= 5e-2  # bf16's tolerance; not 0: it really ran in bf16
    # The policy was scoped to the build: the next model is fp32 again.
    assert precision_used(to_keras(model, "resnet", (3, 32, 32)))["compute_dtype"] == ["float32"]


def test_every_level_trains_from_eagers_weights_and_agrees_on_the_first_losses(tmp_path, capsys):
    for module in ("tensorflow", "jax"):
        pytest.importorskip(module)
    db = tmp_path / "t.db"
    argv = ["train", "mlp", "--backends", ",".join(("eager", *LEVELS)), "--epochs", "1"]
    assert main([*argv, "--limit", "256", "--threads", "1", "--db", str(db)]) == 0
    assert "loss Δ" in capsys.readouterr().out
    (run,) = load_runs(db, [])
    cells = run.cells()
    for level in cells:
        if level.cell.backend != "eager":
            assert agreement(level, eager_twin(level, cells)).agrees, level.cell.backend
    results = {cell.backend: rep for cell, rep in run.records}
    assert set(results) == {"eager", *LEVELS}
    eager = results["eager"]
    for name in LEVELS:
        rep = results[name]
        assert rep.status in ("ok", "disturbed"), (name, rep.status, rep.reason)
        assert rep.weights_digest == eager.weights_digest
        assert len(rep.epochs) == 1 and rep.epochs[0].eval_accuracy is not None
        details = rep.details
        assert details["optimizer"] == "SGD" and details["lr_schedule_impl"] == "CosineDecay"
        assert details["stochastic_layers"] == []
        losses, reference = details["first_losses"], eager.details["first_losses"]
        assert len(losses) == len(reference) == 4  # 256 samples: 4 full batches of 64
        # Step 1 is one forward of the same weights on the same batch.
        assert abs(losses[0] - reference[0]) <= 1e-4 * reference[0], name
    assert results["keras"].details["call"] == "train_on_batch"
    assert results["jax"].details["state_donated"] is True
    assert results["tf"].details["tf_intra_op_threads"] == 1
