"""Each backend against eager on a tiny conv net: same weights, same input, same answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from stackcost.backends import PrepareContext, load_backend
from stackcost.cell import Cell, ModelRef
from stackcost.workload import Example
from tests.conftest import tiny_cell

FP32_TOL = 1e-4
BF16_REL_TOL = 5e-2  # relative to max |reference|
# torch.utils.mkldnn, imported by inductor, uses torch.jit.script_method at import time.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    )
    # Non-trivial BN statistics, so folding BN into the conv actually gets exercised.
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model.eval()


def tiny_input(device: str = "cpu") -> Example:
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)).to(device)
    return Example(("input",), (x,))


def make_cell(backend: str, **kw) -> Cell:
    return Cell(
        model=ModelRef(name="tiny"), backend=backend, batch_size=2, resolution=16, threads=1, **kw
    )


def run(backend_name: str, tmp_path: Path, device: str = "cpu", paced: bool = False, **kw):
    """Prepare, step twice; return (outputs, details, reference, cell). `paced`: as in
    ab's bursts."""
    backend = load_backend(backend_name)
    status = backend.available()
    if not status.ok:
        pytest.skip(status.reason)
    cell = make_cell(backend_name, device=device, **kw)
    assert backend.capabilities.why_not(cell) is None
    x = tiny_input(device)
    with torch.inference_mode():
        reference = x.call(tiny_model().to(device)).float().cpu()
    ctx = PrepareContext(tmp_path, paced=paced)
    prepared = backend.prepare(tiny_model().to(device), x, cell, ctx)
    outputs = [as_tensor(prepared.step()) for _ in range(2)]
    return outputs, prepared.details, reference, cell


def as_tensor(out) -> torch.Tensor:
    if isinstance(out, list):  # ONNX Runtime and OpenVINO: every output, in graph order
        (out,) = out
    if isinstance(out, np.ndarray):
        return torch.from_numpy(np.array(out, dtype=np.float32))
    return out.detach().float().cpu()


def assert_close(outputs, reference, precision: str = "fp32") -> None:
    tol = FP32_TOL if precision == "fp32" else BF16_REL_TOL * reference.abs().max().item()
    for out in outputs:
        assert out.shape == reference.shape
        assert (out - reference).abs().max().item() < tol


# -- torchscript ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"variant": "script"},
        {"freeze": "false"},
        {"variant": "script", "optimize": "false"},
    ],
)
def test_torchscript_fp32(tmp_path, options):
    outputs, details, reference, _ = run("torchscript", tmp_path, backend_options=options)
    assert_close(outputs, reference)
    expected = {"variant": "trace", "freeze": True, "optimize": True}
    if options.get("variant"):
        expected["variant"] = options["variant"]
    if options.get("freeze") == "false":
        expected.update(freeze=False, optimize=False)  # explicit freeze=false wins the default
    if options.get("optimize") == "false":
        expected["optimize"] = False
    assert {k: details[k] for k in expected} == expected
    assert details["torch"] == torch.__version__


def test_torchscript_bf16(tmp_path):
    outputs, details, reference, _ = run("torchscript", tmp_path, precision="bf16")
    assert outputs[0].dtype == torch.float32  # as_tensor upcasts; the step ran bf16
    assert_close(outputs, reference, "bf16")
    assert details["optimize"] is True


def test_torchscript_rejects_bad_values(tmp_path):
    with pytest.raises(ValueError, match="needs freeze"):
        run("torchscript", tmp_path, backend_options={"freeze": "false", "optimize": "true"})
    with pytest.raises(ValueError, match="variant"):
        run("torchscript", tmp_path, backend_options={"variant": "compile"})


@needs_cuda
def test_torchscript_cuda(tmp_path):
    outputs, _, reference, _ = run("torchscript", tmp_path, device="cuda")
    assert_close(outputs, reference)


# -- inductor / AOTInductor (compile C++: slow) ---------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"freezing": "true", "layout_optimization": "false"}])
def test_inductor(tmp_path, options):
    outputs, details, reference, _ = run("inductor", tmp_path, backend_options=options)
    assert details["freezing"] == (options.get("freezing") == "true")
    assert details["layout_optimization"] == (options.get("layout_optimization") != "false")
    assert_close(outputs, reference)
    assert details["mode"] == "default"
    assert details["dynamic"] is False and details["fullgraph"] is False
    assert details["torch"] == torch.__version__
    assert Path(details["cache_dir"]).is_relative_to(tmp_path)
    # Inductor's ISA probe is the machine's, compiled once, not again in each cell's cache.
    assert details["vec_isa"] and not Path(details["vec_isa_probe_cache"]).is_relative_to(tmp_path)
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == details["cache_dir"]


@needs_cuda
@pytest.mark.slow
def test_inductor_cuda(tmp_path):
    outputs, _, reference, _ = run("inductor", tmp_path, device="cuda")
    assert_close(outputs, reference)


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"layout_optimization": "false"}])
def test_export_aot(tmp_path, options):
    outputs, details, reference, _ = run("export-aot", tmp_path, backend_options=options)
    assert_close(outputs, reference)
    assert details["layout_optimization"] == (options.get("layout_optimization") != "false")
    assert details["compile_s"] > 0
    assert (tmp_path / "model.pt2").stat().st_size == details["package_bytes"]
    assert details["vec_isa"] and not Path(details["vec_isa_probe_cache"]).is_relative_to(tmp_path)


# -- ONNX Runtime ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options", [{}, {"exporter": "legacy"}, {"opt_level": "disable"}, {"opt_level": "basic"}]
)
def test_onnxruntime(tmp_path, options):
    outputs, details, reference, cell = run("onnxruntime", tmp_path, backend_options=options)
    assert_close(outputs, reference)
    assert details["exporter"] == options.get("exporter", "dynamo")
    assert details["opt_level"] == options.get("opt_level", "all")
    assert details["intra_op_threads"] == cell.threads
    assert details["inter_op_threads"] == 1
    assert details["providers"] == ["CPUExecutionProvider"]
    assert isinstance(details["opset"], int) and details["opset"] >= 17
    assert details["onnx_bytes"] > 0 and details["export_s"] > 0
    assert details["intra_op_spinning"] is True  # ONNX Runtime's default, as users run it


def test_onnxruntime_paced_in_bursts_does_not_spin(tmp_path):
    import onnxruntime as ort

    from stackcost.backends.ort_options import session_options

    outputs, details, reference, _ = run("onnxruntime", tmp_path, paced=True)
    assert_close(outputs, reference)
    assert details["intra_op_spinning"] is False
    key = "session.intra_op.allow_spinning"
    assert session_options(ort, 2, "all", spinning=False).get_session_config_entry(key) == "0"


def test_onnxruntime_fp32_only():
    cell = make_cell("onnxruntime", precision="bf16")
    assert "precision bf16" in load_backend("onnxruntime").capabilities.why_not(cell)


def test_onnxruntime_bad_opt_level(tmp_path):
    with pytest.raises(ValueError, match="opt_level"):
        run("onnxruntime", tmp_path, backend_options={"opt_level": "max"})


def test_onnx_export_is_quiet(tmp_path):
    """No progress lines or torchvision warnings (a fresh process: they log once per process)."""
    pytest.importorskip("onnxscript")
    code = (
        "import sys, torch; from pathlib import Path\n"
        "from tests.backends.test_backends import tiny_model, tiny_input\n"
        "from stackcost.backends.onnx_export import export_onnx\n"
        "for exporter in ('dynamo', 'legacy'):\n"
        "    d = export_onnx(tiny_model(), tiny_input(), Path(sys.argv[1]) / exporter / 'm.onnx',"
        " exporter)\n"
        "    assert d['opset'] >= 17, d\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_onnxruntime_cuda(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(RuntimeError, match="CUDAExecutionProvider"):
            run("onnxruntime", tmp_path, device="cuda")
        return
    outputs, details, reference, _ = run("onnxruntime", tmp_path, device="cuda")
    assert_close(outputs, reference)
    assert details["providers"][0] == "CUDAExecutionProvider"


# -- OpenVINO -------------------------------------------------------------------------------


def test_openvino_fp32(tmp_path):
    outputs, details, reference, cell = run("openvino", tmp_path)
    assert_close(outputs, reference)
    assert outputs[0] is not outputs[1]
    # The CPU plugin defaults to bf16 where it can; fp32 must really be f32.
    assert details["inference_precision"] == "f32"
    assert details["inference_threads"] == cell.threads
    assert details["exporter"] == "dynamo"


def test_openvino_bf16(tmp_path):
    import os

    from stackcost.env import onednn_bf16_capped

    ov = pytest.importorskip("openvino")
    capped = onednn_bf16_capped(os.environ.get("ONEDNN_MAX_CPU_ISA"))
    if capped or "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        with pytest.raises(RuntimeError, match="BF16"):
            run("openvino", tmp_path, precision="bf16")
        return
    outputs, details, reference, _ = run("openvino", tmp_path, precision="bf16")
    assert_close(outputs, reference, "bf16")
    assert details["inference_precision"] == "bf16"


def test_openvino_step_reads_its_buffers_and_keep_copies_them_out(tmp_path):
    backend = load_backend("openvino")
    if not backend.available().ok:
        pytest.skip(backend.available().reason)
    cell = make_cell("openvino")
    prepared = backend.prepare(tiny_model(), tiny_input(), cell, PrepareContext(tmp_path))
    assert prepared.keep is not None
    (held,) = prepared.keep(prepared.step())
    (first,), (second,) = prepared.step(), prepared.step()
    # No copy inside the timed step: each call hands back the request's own buffer ...
    assert np.shares_memory(first, second)
    # ... and what is held past the next call is a copy of it, with the same answer.
    assert not np.shares_memory(held, second)
    np.testing.assert_array_equal(held, second)


def test_openvino_cpu_only():
    cell = make_cell("openvino", device="cuda")
    assert "device cuda" in load_backend("openvino").capabilities.why_not(cell)


# -- contract -------------------------------------------------------------------------------

ALL = ["torchscript", "inductor", "export-aot", "onnxruntime", "openvino"]


@pytest.mark.parametrize("name", ALL)
def test_unknown_options_rejected(name):
    backend = load_backend(name)
    assert backend.name == name
    assert backend.check_options({}) is None
    for key, option in backend.options.items():
        assert backend.check_options({key: option.default}) is None
        for value in option.choices:
            assert (
                backend.option(tiny_cell(backend=name, backend_options={key: value}), key) == value
            )
        message = backend.check_options({key: "<nonsense>"})
        assert message is not None and f"{name}.{key}='<nonsense>'" in message, message
        assert ", ".join(option.choices) in message
    message = backend.check_options({"bogus": "1"})
    assert message is not None and "bogus" in message


def test_listing_imports_no_framework():
    code = (
        "import sys; from stackcost.backends import load_backend\n"
        f"for n in {ALL!r}: b = load_backend(n); b.available(); b.capabilities\n"
        "bad = [m for m in ('torch', 'onnxruntime', 'openvino', 'onnx') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
