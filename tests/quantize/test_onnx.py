"""ONNX Runtime's quantized precisions: built by onnxruntime.quantization from the exported
fp32 graph, recorded as built, and run end to end by the onnxruntime rung."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stackcost import zoo
from stackcost.axes import PRECISION_TOLERANCE, QUANTIZED
from stackcost.backends import load_backend
from stackcost.quantize import Calibration, calibration_set
from stackcost.result import MEASURED_STATUSES
from stackcost.runspec.run import model_ref
from stackcost.scenarios.task import RepetitionTask
from stackcost.workload import Example, make_example
from tests.conftest import FAST, ROOT, needs, tiny_cell

ort = pytest.importorskip("onnxruntime")
pytestmark = needs("onnxscript")

BATCH = 32  # rows enough for the top-1 rule to be judged (QuantRule.min_rows)
# Tiny shapes: mlp on 4x4 inputs (16 -> 512 -> 256 -> 10); mnist-cnn at its minimum, 28.
MODELS = {"mlp": 4, "mnist-cnn": 28}
# What each precision builds on these two graphs, counted from the written graph.
EXPECTED_OPS = {
    ("mlp", "int8-dyn"): ({"MatMulInteger": 3}, {}),
    ("mlp", "int8"): ({"Gemm": 3}, {}),
    ("mlp", "w8"): ({"MatMulNBits": 3}, {}),
    ("mlp", "w4"): ({"MatMulNBits": 3}, {}),
    ("mnist-cnn", "int8-dyn"): ({"ConvInteger": 2, "MatMulInteger": 2}, {}),
    ("mnist-cnn", "int8"): ({"Conv": 2, "Gemm": 2}, {}),
    # MatMulNBits has no convolution: weight-only leaves the convs in float.
    ("mnist-cnn", "w8"): ({"MatMulNBits": 2}, {"Conv": 2}),
    ("mnist-cnn", "w4"): ({"MatMulNBits": 2}, {"Conv": 2}),
}


def feeds(example: Example) -> dict[str, np.ndarray]:
    return {name: t.numpy() for name, t in example.named().items()}


@pytest.fixture(scope="module")
def graphs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, Example, Calibration]]:
    """Each model's fp32 graph as the rung exports it, an input and its calibration set."""
    from stackcost.backends.onnx_export import export_onnx

    out = {}
    for name, resolution in MODELS.items():
        ref, sizes = model_ref(name), {"resolution": resolution}
        workload = zoo.workload_of(ref)
        example = make_example(workload, ref, BATCH, sizes)
        path = tmp_path_factory.mktemp(name) / "model.onnx"
        export_onnx(zoo.build_model(ref, sizes).eval(), example, path, "dynamo")
        out[name] = (path, example, calibration_set(workload, ref, BATCH, sizes))
    return out


def run_graph(path: Path, example: Example) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds(example))[0]


@pytest.mark.parametrize(("model", "precision"), sorted(EXPECTED_OPS))
def test_every_precision_builds_and_records_what_it_built(graphs, tmp_path, model, precision):
    from stackcost.quantize.onnx import quantize_onnx

    src, example, calibration = graphs[model]
    handlers = list(logging.getLogger().handlers)
    record = quantize_onnx(src, tmp_path, precision, calibration, feeds)
    assert logging.getLogger().handlers == handlers  # the tools' root handler taken back

    quantized, floats = EXPECTED_OPS[model, precision]
    assert record.precision == precision and record.tool.startswith(
        f"onnxruntime {ort.__version__}"
    )
    assert record.ops.quantized == quantized and record.ops.float == floats
    assert 0 < record.weight_bytes < record.fp32_weight_bytes
    assert record.weights != "float"
    if precision in ("w8", "w4"):
        assert record.group_size == 32 and record.activations.startswith("float")
        assert f"int{precision[1]} asymmetric, groups of 32" in record.weights
    else:
        assert record.group_size is None and "int8 symmetric per-channel" in record.weights
    if precision == "int8":
        assert record.calibration == calibration.record()
        assert "static" in record.activations
        assert any("QGemm" in note for note in record.notes)  # what ORT's session runs
    else:
        assert record.calibration is None
    if precision == "int8-dyn":
        assert "dynamic" in record.activations
    # Only the quantized graph is left in the directory, and it runs close to fp32.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    out, ref = run_graph(tmp_path / "model.onnx", example), run_graph(src, example)
    assert np.abs(out - ref).max() / np.abs(ref).max() <= PRECISION_TOLERANCE[precision]


def test_weight_only_int4_is_smaller_than_int8(graphs, tmp_path):
    from stackcost.quantize.onnx import quantize_onnx

    src, _, _ = graphs["mlp"]
    w8 = quantize_onnx(src, tmp_path / "w8", "w8", None, feeds)
    w4 = quantize_onnx(src, tmp_path / "w4", "w4", None, feeds)
    assert w4.weight_bytes < w8.weight_bytes < w8.fp32_weight_bytes


def test_refusals(graphs, tmp_path):
    from stackcost.quantize.onnx import quantize_onnx

    src, _, _ = graphs["mlp"]
    with pytest.raises(ValueError, match="calibration"):
        quantize_onnx(src, tmp_path, "int8", None, feeds)
    with pytest.raises(ValueError, match="bf16"):
        quantize_onnx(src, tmp_path, "bf16", None, feeds)


def test_quantization_is_quiet(tmp_path):
    """No tool warnings or progress lines (a fresh process: some log once per process)."""
    code = (
        "import sys; from pathlib import Path\n"
        "from tests.quantize.test_onnx import MODELS, feeds\n"
        "from stackcost import zoo; from stackcost.runspec.run import model_ref\n"
        "from stackcost.workload import make_example\n"
        "from stackcost.quantize import calibration_set\n"
        "from stackcost.backends.onnx_export import export_onnx\n"
        "from stackcost.quantize.onnx import quantize_onnx\n"
        "ref, sizes = model_ref('mnist-cnn'), {'resolution': 28}\n"
        "wl = zoo.workload_of(ref); ex = make_example(wl, ref, 2, sizes)\n"
        "src = Path(sys.argv[1]) / 'fp32' / 'model.onnx'\n"
        "export_onnx(zoo.build_model(ref, sizes).eval(), ex, src, 'dynamo')\n"
        "cal = calibration_set(wl, ref, 2, sizes)\n"
        "for p in ('int8-dyn', 'int8', 'w8', 'w4'):\n"
        "    quantize_onnx(src, Path(sys.argv[1]) / p, p, cal, feeds)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""


def test_the_rung_offers_every_quantized_precision_on_the_cpu_only():
    backend = load_backend("onnxruntime")
    for precision in QUANTIZED:
        assert backend.why_not(tiny_cell("onnxruntime", precision=precision)) is None
        reason = backend.why_not(tiny_cell("onnxruntime", precision=precision, device="cuda"))
        assert reason and precision in reason and "cuda" in reason
    assert "fp32 only" not in backend.description


def test_prepare_without_the_artifact_cache(tmp_path):
    """A quantized graph made in the repetition's own workdir when the run has no cache."""
    from stackcost.backends import PrepareContext

    backend = load_backend("onnxruntime")
    cell = tiny_cell("onnxruntime", precision="w4")
    ref = cell.model
    model = zoo.build_model(ref, cell.sizes).eval()
    example = make_example(zoo.workload_of(ref), ref, cell.batch_size, cell.sizes)
    prepared = backend.prepare(model, example, cell, PrepareContext(tmp_path))
    (out,) = prepared.step()
    assert out.shape == (cell.batch_size, 10)
    assert prepared.details["quantization"]["ops"]["quantized"] == {"MatMulNBits": 3}
    assert prepared.state["path"] == tmp_path / "onnx-quantized" / "model.onnx"
    assert "artifact" not in prepared.details


def test_an_int8_cell_runs_end_to_end_and_reuses_its_graph(tmp_path):
    """The worker's whole repetition: export, calibrate and quantize once, verify by the
    int8 rule; the second repetition reuses the quantized graph."""
    from stackcost.execute.worker import run_task

    cell = tiny_cell("onnxruntime", precision="int8", batch_size=BATCH)
    results = [
        run_task(
            RepetitionTask(
                cell=cell,
                repetition=rep,
                protocol=FAST,
                tolerance=PRECISION_TOLERANCE["int8"],
                timeout_s=120,
                workdir=str(tmp_path / f"w{rep}"),
                cache_dir=str(tmp_path / "cache"),
            )
        )
        for rep in range(2)
    ]
    for result in results:
        # disturbed: other processes on a shared machine, not a wrong answer.
        assert result.status in MEASURED_STATUSES, result.reason
        v = result.verification
        assert v is not None and v.ok, v
        assert v.rule and v.agreement is not None and v.agreement.rows == BATCH
        assert v.agreement.top1 >= QUANTIZED["int8"].min_top1
        q = result.details["quantization"]
        assert q["precision"] == "int8" and q["ops"]["quantized"] == {"Gemm": 3}
        assert q["calibration"]["samples"] >= BATCH
    first, second = (r.details["artifact"] for r in results)
    assert not first["reused"] and second["reused"] and first["key"] == second["key"]


def test_auto_scheme_follows_the_guide_for_the_cpu():
    from stackcost.quantize.onnx import NO_VNNI_SCHEME, int8_scheme

    for flags in (["avx2", "avx512_vnni"], ["avx2", "avx_vnni"], ["avx2", "amx_int8"]):
        scheme, why = int8_scheme("auto", flags)
        assert scheme == "full-range" and flags[1] in why
    scheme, why = int8_scheme("auto", ["avx2", "avx512f"])
    assert scheme == NO_VNNI_SCHEME and "no VNNI" in why and "saturate" in why
    assert int8_scheme("reduce-range", ["avx512_vnni"])[0] == "reduce-range"
    with pytest.raises(ValueError, match="u8s8.*use one of"):
        int8_scheme("u8s8", [])


@pytest.mark.parametrize(("scheme", "weights"), [("reduce-range", "int8 symmetric per-channel, 7-bit range"), ("u8u8", "uint8 symmetric per-channel")])  # fmt: skip
def test_each_scheme_is_recorded_as_the_graph_stores_it(graphs, tmp_path, scheme, weights):
    from stackcost.quantize.onnx import quantize_onnx

    src, example, calibration = graphs["mnist-cnn"]
    for precision in ("int8-dyn", "int8"):
        record = quantize_onnx(
            src, tmp_path / precision, precision, calibration, feeds, (scheme, "asked")
        )
        assert record.scheme == scheme and record.scheme_reason == "asked"
        assert weights in record.weights
        if precision == "int8" and scheme == "u8u8":
            assert record.activations.startswith("uint8 asymmetric")
    w8 = quantize_onnx(src, tmp_path / "w8", "w8", None, feeds, (scheme, "asked"))
    assert w8.scheme is None  # weight-only graphs have no int8 dot product to fit


def test_a_record_without_a_scheme_follows_this_cpu(graphs, tmp_path):
    """No scheme given: `auto` for the CPU the test runs on, read from its flags."""
    from stackcost.env import cpu_info, vnni
    from stackcost.quantize.onnx import NO_VNNI_SCHEME, quantize_onnx

    src, _, calibration = graphs["mlp"]
    record = quantize_onnx(src, tmp_path, "int8", calibration, feeds)
    expected = "full-range" if vnni(cpu_info()["flags"]) else NO_VNNI_SCHEME
    assert record.scheme == expected and record.scheme_reason.startswith("auto: ")
