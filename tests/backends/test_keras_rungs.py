"""The TensorFlow, Keras and JAX rungs: the zoo's CNNs rebuilt in Keras 3 with the eager
model's weights give eager's answer, and every rung runs through the engine verified."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
import torch

from stackcost.backends import load_backend
from stackcost.cell import Cell
from stackcost.cli import main
from stackcost.runspec.run import model_ref
from stackcost.zoo import build_model
from tests.conftest import needs

pytestmark = needs("keras", reason="the tf/jax extras are not installed")
RUNGS = ("tf", "tf-xla", "keras", "keras-xla", "jax")


def _with_bn_statistics(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial running statistics, so the BN conversion is actually exercised."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.rand(m.num_features, generator=gen) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.rand(m.num_features, generator=gen) - 0.5)
    return model


@pytest.mark.parametrize(
    ("name", "resolution", "channels"),
    [("mlp", 8, 1), ("mnist-cnn", 28, 1), ("resnet18", 32, 3), ("resnet50", 33, 3)],
)
def test_keras_definition_with_converted_weights_matches_eager(name, resolution, channels):
    pytest.importorskip("tensorflow")
    from stackcost.backends.keras_models import family, nhwc, to_keras

    model = _with_bn_statistics(build_model(model_ref(name), resolution))
    x = torch.randn(2, channels, resolution, resolution, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = model(x).numpy()
    keras_model = to_keras(model, family(name), (channels, resolution, resolution))
    got = np.asarray(keras_model(nhwc(x.numpy()), training=False))
    scale = np.abs(expected).max()
    # Odd sizes (33 px) check that stride-2 padding is torch's, not Keras' "same".
    assert np.abs(got - expected).max() <= 1e-4 * scale, name


def test_models_without_a_keras_definition_are_unsupported_with_the_reason():
    cell = Cell(model=model_ref("dlrm-small"), backend="keras", sizes={})
    for rung in RUNGS:
        why = load_backend(rung).why_not(cell)
        assert why is not None and why.startswith("no Keras definition of dlrm-small"), why


def test_keras_call_option_is_checked():
    backend = load_backend("keras")
    assert backend.check_options({"call": "__call__"}) is None
    assert "allowed: predict_on_batch, __call__" in backend.check_options({"call": "fit"})


def test_every_rung_runs_verified_and_records_its_framework(tmp_path, capsys):
    for module in ("tensorflow", "jax"):
        pytest.importorskip(module)
    db = tmp_path / "k.db"
    argv = ["run", "mnist-cnn", "--resolution", "28", "--batch-size", "2", "--threads", "1"]
    argv += ["--backends", ",".join(("eager", *RUNGS)), "--db", str(db), "--quiet"]
    argv += ["--min-time", "0.05", "--max-time", "0.5", "--on-disturbed", "keep"]
    main(argv)
    capsys.readouterr()
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT c.backend, r.status, r.reason, r.result_json FROM repetitions r "
            "JOIN cells c ON c.id = r.cell_id"
        ).fetchall()
    by_backend = {b: (status, reason, json.loads(result)) for b, status, reason, result in rows}
    assert set(by_backend) == {"eager", *RUNGS}
    for rung in RUNGS:
        status, reason, result = by_backend[rung]
        assert status in ("ok", "unstable", "disturbed"), (rung, status, reason)
        assert result["verification"]["ok"], rung
        details = result["details"]
        assert details["input_layout"].startswith("NHWC")
        assert details["jit_compile"] == (rung != "tf" and rung != "keras"), rung
    assert by_backend["keras"][2]["details"]["call"] == "predict_on_batch"
    tf_details = by_backend["tf"][2]["details"]
    assert tf_details["tf_intra_op_threads"] == 1 and tf_details["tf_inter_op_threads"] == 1
    assert by_backend["jax"][2]["details"]["keras_backend"] == "jax"
    assert by_backend["jax"][2]["details"]["xla_cpu_threads"] == 1
    assert "cpu" in by_backend["jax"][2]["details"]["jax_device"].lower()  # the cell's device
