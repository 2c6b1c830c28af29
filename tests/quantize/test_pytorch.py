"""The PyTorch rungs' quantized precisions: built by torchao, recorded as built, and judged
by the precision's rule; a deliberately broken quantization comes out wrong, never ok."""

from __future__ import annotations

import pytest

from stackcost import zoo
from stackcost.axes import PRECISION_TOLERANCE
from stackcost.backends.eager import EagerBackend
from stackcost.execute.worker import run_task
from stackcost.quantize import calibration_set
from stackcost.quantize.pytorch import COMPILED_PATHS, EAGER_PATHS, quantize
from stackcost.result import MEASURED_STATUSES
from stackcost.runspec.run import model_ref
from stackcost.scenarios.task import RepetitionTask
from stackcost.workload import make_example
from tests.conftest import FAST, needs, tiny_cell

pytestmark = needs("torchao")

SIZES = {"resolution": 28}


class BrokenScalesEager(EagerBackend):
    """Eager with every weight scale multiplied by 10 after torchao quantized it."""

    quantize_scale_error = 10.0


def built(precision: str, path: str):
    ref = model_ref("mnist-cnn")
    workload = zoo.workload_of(ref)
    model = zoo.build_model(ref, SIZES).eval()
    example = make_example(workload, ref, 4, SIZES)
    calibration = calibration_set(workload, ref, 4, SIZES, samples=8)
    return model, example, quantize(model, example, precision, path, calibration)


@pytest.mark.parametrize("precision", sorted(COMPILED_PATHS))
def test_each_precision_records_what_torchao_built(precision):
    import torch

    model, example, (module, record) = built(precision, COMPILED_PATHS[precision])
    with torch.no_grad():
        out, ref = example.call(module), example.call(model)
    assert out.shape == ref.shape
    assert float((out - ref).abs().max() / ref.abs().max()) < PRECISION_TOLERANCE[precision]
    ops = record.ops
    if COMPILED_PATHS[precision] == "pt2e":  # every conv and linear of the graph
        assert ops.quantized == {"conv2d": 2, "linear": 2} and not ops.float
        assert record.weight_bytes < record.fp32_weight_bytes / 3
    elif precision == "w4":  # fc1 has 50 inputs, no multiple of 32: it stays float
        assert ops.quantized == {"Linear": 1} and ops.float == {"Conv2d": 2, "Linear": 1}
        assert any("no multiple of 32" in note for note in record.notes)
    else:  # quantize_ takes nn.Linear only: the convolutions stay float, counted
        assert ops.quantized == {"Linear": 2} and ops.float == {"Conv2d": 2}
    assert (record.calibration is not None) == (precision == "int8")
    assert record.tool.startswith("torchao ")
    # PT2E follows torchao's guide for the ISA oneDNN runs here; quantize_ has no such choice.
    if COMPILED_PATHS[precision] == "pt2e":
        assert record.scheme in ("reduce_range=True", "reduce_range=False")
        assert record.scheme_reason.startswith("auto: ")
        assert ("7-bit" in record.activations) == (record.scheme == "reduce_range=True")
    else:
        assert record.scheme is None


def test_reduce_range_follows_the_isa_onednn_runs():
    from stackcost.quantize.pytorch import reduce_range

    assert reduce_range("auto", ["avx2", "fma"], None)[0] is True
    assert reduce_range("auto", ["avx2", "avx512_vnni"], None)[0] is False
    assert reduce_range("auto", ["amx_int8"], None)[0] is False
    on, why = reduce_range("auto", ["avx512_vnni"], "AVX2")  # narrowed below VNNI
    assert on is True and "ONEDNN_MAX_CPU_ISA=AVX2" in why
    off, why = reduce_range("false", ["avx2"], None)
    assert off is False and why.startswith("reduce_range=false: asked for")
    with pytest.raises(ValueError, match="use one of"):
        reduce_range("7bit", [], None)


def test_eager_has_no_static_int8_and_says_why():
    reason = EagerBackend().why_not(tiny_cell(precision="int8"))
    assert reason and "PT2E" in reason and "inductor" in reason
    assert "int8" not in EAGER_PATHS


@pytest.mark.parametrize(("backend", "expect_ok"), [
    ("eager", True),
    ("tests.quantize.test_pytorch:BrokenScalesEager", False),
])  # fmt: skip
def test_a_broken_quantization_is_wrong_not_ok(tmp_path, backend, expect_ok):
    """The same w8 cell, once as torchao built it and once with its scales x10: the
    rule calls the second wrong with the error that gave it away."""
    cell = tiny_cell(backend, precision="w8", batch_size=8)
    result = run_task(
        RepetitionTask(
            cell=cell,
            protocol=FAST,
            tolerance=PRECISION_TOLERANCE["w8"],
            timeout_s=120,
            workdir=str(tmp_path),
        )
    )
    v = result.verification
    assert v is not None and v.agreement is not None and v.rule
    if expect_ok:
        assert result.status in MEASURED_STATUSES, result.reason
        assert v.ok
    else:
        assert result.status == "wrong"
        assert "max rel err" in result.reason and not v.ok
        assert result.details["quantization"]["precision"] == "w8"


@pytest.mark.slow
def test_inductor_compiles_pt2e_int8_frozen_and_leaves_the_config_as_it_was(tmp_path):
    """PT2E's int8 graph is fast only frozen (its weights packed once); the freezing is
    patched per call, so a warm worker's next cell finds Inductor's config unchanged."""
    import torch._inductor.config

    from stackcost.backends import PrepareContext
    from stackcost.backends.inductor import InductorBackend

    ref = model_ref("mnist-cnn")
    cell = tiny_cell("inductor", model=ref, precision="int8", batch_size=4, resolution=28)
    workload = zoo.workload_of(ref)
    model = zoo.build_model(ref, SIZES).eval()
    example = make_example(workload, ref, 4, SIZES)
    ctx = PrepareContext(
        workdir=tmp_path, calibration=calibration_set(workload, ref, 4, SIZES, samples=8)
    )
    before = torch._inductor.config.freezing
    prepared = InductorBackend().prepare(model, example, cell, ctx)
    out = prepared.step()
    assert out.shape == (4, 10)
    assert prepared.details["freezing"] is True and "oneDNN" in prepared.details["freezing_why"]
    assert torch._inductor.config.freezing == before
