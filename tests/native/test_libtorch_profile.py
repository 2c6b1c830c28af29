"""The LibTorch program's profiled pass: a Kineto trace read back into a breakdown."""

from __future__ import annotations

import pytest

from stackcost import zoo
from stackcost.backends import PrepareContext, load_backend
from stackcost.backends.base import NoBreakdown
from stackcost.cell import Cell
from stackcost.profile.breakdown import CPU_PARTS
from tests.native.conftest import MODELS, QUICK, example


def _profiled(backend_name: str, tmp_path, profile_iters: int = 3):
    ref, resolution = MODELS["mnist-cnn"]
    cell = Cell(model=ref, backend=backend_name, batch_size=1, resolution=resolution, threads=1)
    model = zoo.build_model(ref, resolution).eval()
    backend = load_backend(backend_name)
    run = backend.run_repetition(
        model,
        example(ref, resolution),
        cell,
        PrepareContext(tmp_path),
        QUICK,
        profile_iters=profile_iters,
    )
    return backend, run, cell


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["libtorch", "torchscript-cpp"])
def test_profiled_pass_splits_the_step(native_build, tmp_path, backend_name):
    backend, run, cell = _profiled(backend_name, tmp_path)
    answer = run.answer
    assert answer["details"]["profile_iters"] == 3
    assert answer["details"]["profile_wall_ns"] > 0
    assert answer["profile_path"].is_file()
    median_ms = run.measurement.stats.median_ms
    b = backend.breakdown(run, cell, 3)
    assert b.check(), b.summary()
    assert b.iters == 3 and b.unprofiled_wall_ms == median_ms
    assert b.parts_ms["kernels"] > 0, b.summary()
    assert set(b.parts_ms) <= {"kernels", "overhead", CPU_PARTS[2]}
    if backend_name == "libtorch":
        assert any("convolution" in r.name for r in b.top_ops[:3]), b.summary()
    else:
        # optimize_for_inference prepacks the convolutions: the profiler cannot see them,
        # so their time is the graph frame's, as for the Python torchscript rung.
        assert answer["details"]["optimize_for_inference"] is True
        # Among the top ops, not always first: on an AVX2-only EPYC the prepacked weights'
        # aten::_to_dense once outran it.
        assert b.parts_ms.get(CPU_PARTS[2], 0) > 0, b.summary()
        assert "forward" in [r.name for r in b.top_ops[:3]], b.summary()
    assert "Kineto" in b.method


@pytest.mark.slow
def test_no_profile_keys_no_profiled_pass(native_build, tmp_path):
    backend, run, cell = _profiled("libtorch", tmp_path, profile_iters=0)
    answer = run.answer
    assert "profile_iters" not in answer["details"] and "profile_path" not in answer
    assert not (tmp_path / "profile.json").exists()
    with pytest.raises(NoBreakdown, match="no profiled pass|profile"):
        backend.breakdown(run, cell, 3)
