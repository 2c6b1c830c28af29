"""The oneDNN rung: primitives built from the folded weights agree with eager."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from stackcost import zoo
from stackcost.backends import load_backend
from stackcost.backends.native import folded_state
from stackcost.cell import Cell, ModelRef
from stackcost.execute.worker import run_task
from stackcost.native.build import ensure_built, onednn_version, toolchain_problem
from stackcost.result import MEASURED_STATUSES
from stackcost.scenarios.task import RepetitionTask
from tests.native.conftest import MODELS, QUICK, example


def test_missing_onednn_names_the_package(monkeypatch, tmp_path):
    import stackcost.native.build as build

    monkeypatch.setattr(build, "DNNL_VERSION_HEADER", tmp_path / "absent.h")
    assert toolchain_problem("onednn", shutil.which) == (
        f"oneDNN ({tmp_path / 'absent.h'}) not found: apt-get install libdnnl-dev"
    )
    assert not load_backend("onednn").available().ok


def test_folding_matches_conv_then_bn():
    torch.manual_seed(0)
    model = zoo.build_model(ModelRef(name="resnet18"), 32).eval()
    for m in model.modules():  # non-trivial running statistics
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    state, folded = folded_state(model)
    assert folded == 20  # every BatchNorm of resnet18
    x = torch.randn(2, 64, 8, 8)
    conv, bn = model.layer1[0].conv1, model.layer1[0].bn1
    ref = bn(conv(x))
    got = torch.nn.functional.conv2d(
        x, state["layer1.0.conv1.folded_weight"], state["layer1.0.conv1.folded_bias"], padding=1
    )
    assert torch.allclose(got, ref, atol=1e-5)
    assert "layer2.0.downsample.0.folded_weight" in state and "fc.weight" in state
    assert not any(".bn" in name or "running" in name for name in state)


def task(tmp_path: Path, model: str, batch: int = 2) -> RepetitionTask:
    ref, resolution = MODELS[model]
    cell = Cell(model=ref, backend="onednn", batch_size=batch, resolution=resolution, threads=2)
    return RepetitionTask(cell=cell, protocol=QUICK, workdir=str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS))
def test_matches_eager(onednn_build, tmp_path, model):
    result = run_task(task(tmp_path, model))
    assert result.status in MEASURED_STATUSES, (result.reason, result.log_tail)
    assert result.verification.ok and result.verification.max_rel_err <= 1e-4
    assert result.stats.n >= QUICK.min_iters and len(result.samples_ns) == result.stats.n
    assert result.cold_start_ms > 0 and result.throughput > 0
    d = result.details
    assert d["onednn"] == onednn_version() and d["onednn_cpu_runtime"] == "openmp"
    assert d["bn_folded"] is (model == "resnet18")  # mnist-cnn has no BatchNorm
    assert d["omp_threads"] == 2
    assert d["primitives"] > 0 and d["first_conv_src_format"] and d["first_conv_weights_format"]
    assert d["build_compiled"] is False  # the session's build, reused


@pytest.mark.slow
def test_build_cache_reuses_the_build(onednn_build):
    again = ensure_built("onednn", onednn_build.executable.parent.parent)
    assert not again.compiled and again.key == onednn_build.key


def test_onednn_refuses_a_model_it_has_no_definition_of():
    cell = Cell(model=ModelRef(name="mlp", num_classes=10, in_channels=1), backend="onednn")
    assert load_backend("onednn").why_not(cell).startswith("no C++ definition of mlp")


@pytest.mark.slow
def test_missing_tensor_fails_with_the_name(onednn_build, tmp_path):
    from stackcost.backends import PrepareContext
    from stackcost.native.tensors import write_tensors

    backend = load_backend("onednn")
    original = backend.export

    def drop_one(model, example, cell, workdir):
        args = original(model, example, cell, workdir)
        state, _ = folded_state(model)
        del state["conv2.folded_bias"]
        write_tensors(workdir / "weights.scw", state)
        return args

    backend.export = drop_one
    ref, resolution = MODELS["mnist-cnn"]
    cell = Cell(model=ref, backend="onednn", batch_size=1, resolution=resolution, threads=1)
    model = zoo.build_model(ref, resolution)
    with pytest.raises(RuntimeError, match="no tensor conv2.folded_bias"):
        backend.run_native(model, example(ref, 28), cell, PrepareContext(tmp_path), QUICK)


@pytest.mark.slow
def test_profiled_run_times_every_primitive(onednn_build, tmp_path):
    # --profile through the real worker: the program's per-primitive timers become the
    # cell's breakdown, next to the sampler's telemetry.
    t = task(tmp_path, "resnet18").model_copy(update={"profile": True})
    result = run_task(t)
    assert result.status in MEASURED_STATUSES, (result.reason, result.log_tail)
    b = result.breakdown
    assert b is not None and b.iters == result.details["profile_iters"] == 10
    assert b.check(), b.summary()  # parts within 5% of the loop's own wall
    assert 0 < b.parts_ms["kernels"] < b.wall_ms and b.parts_ms["overhead"] >= 0
    assert b.top_ops[0].name.startswith("convolution (") and b.top_ops[0].calls % 10 == 0
    assert sum(r.calls for r in b.top_ops) <= result.details["primitives"] * 10
    assert any(n.startswith("slowest layers: ") for n in b.notes)
    assert b.unprofiled_wall_ms == pytest.approx(result.stats.median_ms)
    assert result.telemetry is not None and result.work is not None
    # The program's own counters over its timed loop: exact, and never above its threads.
    tel = result.telemetry
    assert tel.means_from.startswith("the measured process's counters")
    assert 0.5 < tel.cpu_util_cores_mean <= 2.05


@pytest.mark.slow
@pytest.mark.whole_machine  # a burner on each core
def test_a_cpp_repetition_beside_burners_is_disturbed(onednn_build, tmp_path):
    """The C++ program's own loop edges feed the same disturbance rule as Python's."""
    from stackcost.measure.protocol import Protocol
    from tests.execute.test_disturbed import burners

    t = task(tmp_path, "mnist-cnn")
    t = t.model_copy(
        update={"protocol": Protocol(min_time_s=0.4, max_time_s=1, warmup_max_time_s=0.5)}
    )
    with burners(2):
        result = run_task(t)
    assert result.status == "disturbed", (result.status, result.reason, result.disturbance)
    assert result.disturbance.others_cores >= 0.9
