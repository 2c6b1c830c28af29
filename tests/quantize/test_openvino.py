"""OpenVINO's quantized precisions: what NNCF builds from the rung's fp32 ONNX graph, counted
back from the built model, and an int8 cell run end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from stackcost.axes import PRECISION_TOLERANCE, QUANTIZED
from stackcost.backends.onnx_export import export_onnx
from stackcost.quantize import Calibration, calibration_set
from stackcost.verify import verify
from stackcost.workload import Example
from tests.conftest import needs, tiny_task

ov = pytest.importorskip("openvino")
pytestmark = needs("nncf")

from stackcost.quantize.openvino import (  # noqa: E402 - after the skips
    DYNAMIC_GROUP,
    DYNAMIC_GROUP_SIZE,
    Quantized,
    dynamic_quantization_changes,
    quantize_model,
)

BATCH = 32  # rows enough for the agreement to be judged (QuantRule.min_rows)


def _has_vnni() -> bool:
    """VNNI that OpenVINO's oneDNN may use: the CPU's, unless ONEDNN_MAX_CPU_ISA caps it."""
    from stackcost.env import cpu_info, vnni

    return bool(vnni(cpu_info()["flags"], os.environ.get("ONEDNN_MAX_CPU_ISA")))


needs_vnni = pytest.mark.skipif(
    not _has_vnni(),
    reason="CPU feature missing: no avx512_vnni, avx_vnni or amx_int8 for oneDNN "
    "(absent, or capped by ONEDNN_MAX_CPU_ISA): no per-call int8 here",
)


class Fp32:
    """A zoo model exported as the rung exports it, its inputs and calibration set."""

    def __init__(self, name: str, resolution: int, home: Path) -> None:
        from stackcost import zoo
        from stackcost.runspec.run import model_ref
        from stackcost.workload import make_example

        ref = model_ref(name)
        workload = zoo.workload_of(ref)
        sizes = {"resolution": resolution}
        torch_model = zoo.build_model(ref, sizes, workload).eval()
        self.example = make_example(workload, ref, BATCH, sizes)
        self.path = home / "model.onnx"
        # The legacy exporter: the same graph for these models, in a tenth of the time.
        export_onnx(torch_model, self.example, self.path, "legacy")
        with torch.inference_mode():
            self.reference = torch_model(*self.example.args).numpy().astype(np.float64)
        self.calibration: Calibration = calibration_set(workload, ref, BATCH, sizes)

    def feed(self, example: Example) -> dict[str, np.ndarray]:
        return {n: t.numpy() for n, t in example.named().items()}

    def quantize(self, precision: str) -> Quantized:
        model = ov.Core().read_model(str(self.path))
        return quantize_model(model, precision, self.calibration, self.feed)

    def run(self, built: Quantized, config: dict[str, Any] | None = None) -> np.ndarray:
        settings = {"INFERENCE_PRECISION_HINT": "f32", **built.config, **(config or {})}
        compiled = ov.Core().compile_model(built.model, "CPU", settings)
        return compiled(self.feed(self.example))[0].astype(np.float64)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Fp32]:
    # mlp at 28 px: its first layer's 784 inputs are no multiple of w4's groups of 32.
    return {name: Fp32(name, 28, tmp_path_factory.mktemp(name)) for name in ("mlp", "mnist-cnn")}


# What each precision builds on the two models, counted from the built model.
EXPECTED = {
    ("mnist-cnn", "int8"): ({"Convolution": 2, "MatMul": 2}, {}),
    ("mnist-cnn", "w8"): ({"Convolution": 2, "MatMul": 2}, {}),
    ("mnist-cnn", "w4"): ({"Convolution": 2, "MatMul": 2}, {}),
    # The plugin quantizes activations per call in MatMuls only: convolutions stay float.
    ("mnist-cnn", "int8-dyn"): ({"MatMul": 2}, {"Convolution": 2}),
    ("mlp", "int8"): ({"MatMul": 3}, {}),
    ("mlp", "w8"): ({"MatMul": 3}, {}),
    ("mlp", "w4"): ({"MatMul": 3}, {}),
    ("mlp", "int8-dyn"): ({"MatMul": 3}, {}),
}


# int8-dyn compiles only where oneDNN may run VNNI: under a cap below it on a CPU with VNNI,
# the plugin picks its VNNI kernel and oneDNN cannot create it (the rung refuses the cell).
@pytest.mark.parametrize(
    ("name", "precision"),
    [pytest.param(*key, marks=needs_vnni) if key[1] == "int8-dyn" else key for key in EXPECTED],
)
def test_each_precision_builds_counts_its_ops_and_shrinks_the_weights(
    models: dict[str, Fp32], name: str, precision: str
) -> None:
    fp32 = models[name]
    built = fp32.quantize(precision)
    record = built.record
    quantized, floats = EXPECTED[name, precision]
    assert (record.precision, record.ops.quantized, record.ops.float) == (
        precision,
        quantized,
        floats,
    )
    assert 0 < record.weight_bytes < record.fp32_weight_bytes / 2
    assert record.tool.startswith("nncf ") and "openvino" in record.tool
    # Per-call activation quantization only where the precision asks for it.
    assert built.config == {DYNAMIC_GROUP: DYNAMIC_GROUP_SIZE if precision == "int8-dyn" else 0}
    # The quantized model still answers like fp32, by the precision's own rule.
    v = verify(
        [fp32.run(built)], fp32.reference, PRECISION_TOLERANCE[precision], QUANTIZED[precision]
    )
    assert v.ok and v.agreement is not None and v.agreement.rows == BATCH, v.detail


def test_the_records_say_which_scheme_each_op_got(models: dict[str, Fp32]) -> None:
    cnn, mlp = models["mnist-cnn"], models["mlp"]
    int8 = cnn.quantize("int8").record
    assert int8.weights == "int8 symmetric per-channel: 2 Convolution, 2 MatMul"
    assert "4 FakeQuantize" in int8.activations and "static" in int8.activations
    assert int8.calibration == cnn.calibration.record()
    w8 = cnn.quantize("w8").record
    assert w8.weights == "uint8 asymmetric per-channel: 2 Convolution, 2 MatMul"
    assert w8.activations.startswith("float") and w8.calibration is None
    # w4: NNCF keeps some layers in its int8 backup; counted, not assumed.
    w4 = cnn.quantize("w4").record
    assert "uint4 asymmetric groups of 32: 1 MatMul" in w4.weights
    assert "uint8 asymmetric per-channel: 2 Convolution, 1 MatMul" in w4.weights
    assert w4.group_size == 32 and any("backup" in n for n in w4.notes)
    # 784 inputs: the groups shrink to 16 rather than the layer falling back to int8.
    w4_mlp = mlp.quantize("w4").record
    assert "uint4 asymmetric groups of 16: 1 MatMul" in w4_mlp.weights
    assert any("groups of 16" in n for n in w4_mlp.notes)
    dyn = cnn.quantize("int8-dyn").record
    assert dyn.weights == "int8 symmetric per-channel: 2 MatMul"
    assert f"groups of {DYNAMIC_GROUP_SIZE}" in dyn.activations


def test_quantizing_prints_nothing(models: dict[str, Fp32], capfd: pytest.CaptureFixture) -> None:
    import logging

    from nncf.common.logging import nncf_logger

    level = nncf_logger.level
    models["mlp"].quantize("int8")
    models["mlp"].quantize("w4")
    assert capfd.readouterr() == ("", "")
    assert nncf_logger.level == level and level != logging.ERROR  # put back


def test_weight_only_keeps_activations_float(models: dict[str, Fp32]) -> None:
    # Left at the plugin's default, a w8 model's MatMuls would quantize activations per
    # call: the answer moves. With the config's 0 it is the weight-only answer.
    fp32 = models["mlp"]
    w8 = fp32.quantize("w8")
    default = ov.Core().get_property("CPU", DYNAMIC_GROUP)
    if default and _has_vnni():
        assert not np.array_equal(fp32.run(w8, {DYNAMIC_GROUP: default}), fp32.run(w8))
    assert np.array_equal(fp32.run(w8), fp32.run(w8, {DYNAMIC_GROUP: 0}))


@needs_vnni
def test_int8_dyn_runs_int8_kernels(models: dict[str, Fp32], tmp_path: Path) -> None:
    """The plugin's answer changes with the activations quantized per call, and oneDNN's
    primitive log (read in a child, where its variable can be set before it loads) shows
    the MatMuls' kernels taking int8 with the activation groups; the convolutions f32."""
    fp32 = models["mnist-cnn"]
    built = fp32.quantize("int8-dyn")
    inputs = fp32.feed(fp32.calibration.examples[0])
    # f32 as the rung asks: on AMX the plugin's default is bf16, which quantizes nothing per call.
    f32 = {"INFERENCE_PRECISION_HINT": "f32", **built.config}
    assert dynamic_quantization_changes(built.model, f32, inputs) > 0
    ov.save_model(built.model, tmp_path / "model.xml", compress_to_fp16=False)
    code = (
        "import numpy as np, openvino as ov\n"
        f"c = ov.Core().compile_model({str(tmp_path / 'model.xml')!r}, 'CPU', "
        f"{{'INFERENCE_PRECISION_HINT': 'f32', {DYNAMIC_GROUP!r}: {DYNAMIC_GROUP_SIZE}}})\n"
        "c({0: np.ones(list(c.inputs[0].shape), np.float32)})\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        # Creation only: with execution profiled too, 2026.4's oneDNN now and then fails
        # a call it runs fine without the log.
        env={**os.environ, "ONEDNN_VERBOSE": "profile_create"},
    )
    assert child.returncode == 0, child.stderr[-2000:]
    log = child.stdout
    created = [line for line in log.splitlines() if ",create:" in line]
    matmuls = [line for line in created if ",inner_product," in line]
    convs = [line for line in created if ",convolution," in line]
    assert len(matmuls) == 2 and len(convs) == 2, log[-2000:]
    assert all(f"src_dyn_quant_group_size:{DYNAMIC_GROUP_SIZE}" in m for m in matmuls)
    assert all("vnni" in m and "wei:u8" in m for m in matmuls)
    assert all("wei:f32" in c and "dyn_quant" not in c for c in convs)


def test_an_int8_openvino_cell_runs_end_to_end_and_reuses_its_model(tmp_path: Path) -> None:
    from stackcost.execute.worker import run_task
    from stackcost.result import MEASURED_STATUSES, artifact_reused

    task = tiny_task(
        tmp_path, "openvino", precision="int8", backend_options={"exporter": "legacy"}
    ).model_copy(
        # The tolerance the runner gives a cell of this precision.
        update={"cache_dir": str(tmp_path / "cache"), "tolerance": PRECISION_TOLERANCE["int8"]}
    )
    first, again = run_task(task), run_task(task)
    for r in (first, again):
        assert r.status in MEASURED_STATUSES, r.reason + r.log_tail
        v = r.verification
        assert v is not None and v.ok and v.rule and v.agreement is not None
        assert v.agreement.rows == 2 and v.agreement.top1 == v.agreement.top1  # not NaN
        q = r.details["quantization"]
        assert q["precision"] == "int8" and q["ops"]["quantized"] == {"MatMul": 3}
        assert r.details["inference_precision"] == "f32"
        assert r.details["dynamic_quantization_group_size"] == 0
    assert not artifact_reused(first.details) and artifact_reused(again.details)
    assert again.details["quantization"] == first.details["quantization"]


def test_the_rung_offers_each_quantized_precision_and_int8_dyn_on_x86_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stackcost.backends import load_backend
    from tests.conftest import tiny_cell

    backend = load_backend("openvino")
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    for precision in QUANTIZED:
        assert backend.why_not(tiny_cell("openvino", precision=precision)) is None
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    reason = backend.why_not(tiny_cell("openvino", precision="int8-dyn"))
    assert reason is not None and "x86" in reason and "aarch64" in reason
    assert backend.why_not(tiny_cell("openvino", precision="w8")) is None


def test_overflow_fix_follows_the_isa_onednn_runs():
    from stackcost.quantize.openvino import overflow_fix

    assert overflow_fix("auto", ["avx2"], None)[0] == "enable"
    assert overflow_fix("auto", ["avx2", "avx512_vnni"], None)[0] == "first_layer_only"
    # Narrowed below VNNI, oneDNN saturates as an AVX2 CPU would: the fix goes everywhere.
    fix, why = overflow_fix("auto", ["avx512_vnni"], "AVX2")
    assert fix == "enable" and "ONEDNN_MAX_CPU_ISA=AVX2" in why
    assert overflow_fix("disable", ["avx2"], None)[0] == "disable"
    with pytest.raises(ValueError, match="use one of"):
        overflow_fix("half", [], None)


def test_int8_records_its_overflow_fix(models: dict[str, Fp32]) -> None:
    fp32 = models["mlp"]
    built = quantize_model(
        ov.Core().read_model(str(fp32.path)), "int8", fp32.calibration, fp32.feed,
        ("enable", "asked"),
    )  # fmt: skip
    assert built.record.scheme == "overflow_fix=enable" and built.record.scheme_reason == "asked"
    assert "overflow_fix=enable" in built.record.tool
    assert fp32.quantize("w8").record.scheme is None


def test_int8_dyn_is_unsupported_where_onednn_is_capped_below_vnni(tmp_path: Path) -> None:
    """Under ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with VNNI, the plugin picked its VNNI kernel
    and oneDNN could not create it: the cell `failed` with a RuntimeError. It is refused as
    on a CPU without VNNI. In a child process: oneDNN reads the cap once per process."""
    import sqlite3

    db = tmp_path / "s.db"
    argv = [sys.executable, "-m", "stackcost.cli", "run", "mlp", "--backends", "openvino",
            "--precision", "int8-dyn", "--threads", "1", "--db", str(db), "--quiet"]  # fmt: skip
    done = subprocess.run(
        argv, env={**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}, capture_output=True, text=True
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    rows = sqlite3.connect(db).execute("SELECT status, reason FROM repetitions").fetchall()
    assert len(rows) == 1, rows
    status, reason = rows[0]
    assert status == "unsupported", reason
    assert "needs VNNI" in reason and "capped at AVX2" in reason
