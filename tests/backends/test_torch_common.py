"""The float precisions beyond the dtype (torch_common.Numerics): tf32 and amp on the
PyTorch rungs, and the CUDA fp32 math flags every cuda cell sets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from stackcost.axes import CUDA_ONLY, PRECISION_TOLERANCE
from stackcost.backends import load_backend
from stackcost.backends.torch_common import Numerics, numerics
from stackcost.cell import Cell
from stackcost.execute.worker import run_task
from stackcost.result import RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.scenarios.task import RepetitionTask
from tests.conftest import FAST, tiny_cell

TORCH_RUNGS = ("eager", "torchscript", "inductor", "export-aot")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
# torch.utils.mkldnn, imported by inductor, uses torch.jit.script_method at import time.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)


def mnist_cell(backend: str, precision: str, device: str = "cpu"):
    return tiny_cell(
        backend, model=model_ref("mnist-cnn"), resolution=28, precision=precision, device=device
    )


def run_cell(
    tmp_path: Path, backend: str, precision: str, device: str = "cpu", cell: Cell | None = None
):
    """One repetition of mnist-cnn (or `cell`), batch 2, verified at the precision's own
    tolerance."""
    (tmp_path / "w").mkdir()  # the executor makes a repetition's workdir
    task = RepetitionTask(
        cell=cell or mnist_cell(backend, precision, device),
        protocol=FAST,
        tolerance=PRECISION_TOLERANCE[precision],
        timeout_s=300,
        workdir=str(tmp_path / "w"),
    )
    return run_task(task)


def assert_verified(result: RepetitionResult, precision: str) -> None:
    assert result.status in ("ok", "unstable", "disturbed"), result.reason
    v = result.verification
    assert v is not None and v.ok and v.tolerance == PRECISION_TOLERANCE[precision]


@pytest.fixture
def restore_flags():
    """Numerics.apply sets this process's CUDA math flags (a worker's, in a run): put the
    test process's back as they were, legacy state first, as apply sets them."""
    cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    legacy = cuda.allow_tf32, cudnn.allow_tf32
    new = cuda.fp32_precision, cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision
    yield
    cuda.allow_tf32, cudnn.allow_tf32 = legacy
    cuda.fp32_precision, cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision = new


def test_tf32_and_amp_are_grid_precisions_with_a_tolerance():
    assert PRECISION_TOLERANCE["tf32"] == 1e-2
    assert PRECISION_TOLERANCE["amp"] == PRECISION_TOLERANCE["bf16"]  # the looser of its two
    for name in TORCH_RUNGS:
        caps = load_backend(name).capabilities
        assert "tf32" in caps.precisions, name
        assert ("amp" in caps.precisions) == (name != "torchscript"), name


@pytest.mark.parametrize("backend", TORCH_RUNGS)
def test_tf32_off_cuda_is_unsupported_with_its_reason(backend):
    problem = load_backend(backend).why_not(mnist_cell(backend, "tf32"))
    assert problem == f"precision tf32: {CUDA_ONLY['tf32']}"
    assert "CUDA tensor-core" in problem and "on cpu use fp32 or bf16" in problem
    assert load_backend(backend).why_not(mnist_cell(backend, "tf32", "cuda")) is None


def test_a_tf32_cpu_cell_is_refused_before_anything_is_built(tmp_path):
    result = run_cell(tmp_path, "eager", "tf32")
    assert result.status == "unsupported" and "CUDA tensor-core math mode" in result.reason
    assert result.phases.build_s is None


def test_torchscript_refuses_amp_with_its_reason():
    problem = load_backend("torchscript").why_not(mnist_cell("torchscript", "amp"))
    assert problem is not None and problem.startswith("precision amp: a trace under")


def test_off_cuda_the_flags_are_left_alone_and_not_recorded(restore_flags):
    before = torch.backends.cudnn.conv.fp32_precision
    for precision in ("fp32", "bf16", "amp"):
        chosen = numerics(mnist_cell("eager", precision))
        assert chosen.fp32_math is None
        assert "matmul_fp32_precision" not in chosen.details()
    assert torch.backends.cudnn.conv.fp32_precision == before  # torch's default: tf32


@pytest.mark.parametrize("math", ["ieee", "tf32"])
def test_the_cuda_flags_agree_with_torchs_legacy_state(restore_flags, math):
    """Set as a cuda cell sets them (the flags exist in a CPU build too): torch's legacy
    getters, which torch.export and Inductor read, answer instead of raising, and
    torch.export leaves cuDNN's as the cell needs them once they are applied again."""
    chosen = Numerics("cuda", math, None)
    chosen.apply()
    assert chosen.details() == {"matmul_fp32_precision": math, "cudnn_conv_fp32_precision": math}
    assert torch.backends.cudnn.rnn.fp32_precision == math
    assert torch.backends.cuda.matmul.allow_tf32 is (math == "tf32")
    assert torch.backends.cudnn.allow_tf32 is (math == "tf32")
    assert torch.get_float32_matmul_precision() == ("high" if math == "tf32" else "highest")
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten()).eval()
    torch.export.export(model, (torch.randn(1, 1, 5, 5),))
    # No TF32 either way; "none" (fp32 math not TF32) is how export hands "ieee" back.
    assert torch.backends.cudnn.conv.fp32_precision in (math, "none")
    chosen.apply()
    assert chosen.details()["cudnn_conv_fp32_precision"] == math


def test_amp_runs_each_call_under_autocast_on_an_fp32_model():
    chosen = numerics(mnist_cell("eager", "amp"))
    assert chosen.autocast_dtype == "bfloat16" and chosen.details() == {
        "autocast_dtype": "bfloat16"
    }
    linear = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with chosen.call():
        assert linear(x).dtype == torch.bfloat16
    assert linear(x).dtype == torch.float32  # only inside the call
    assert numerics(mnist_cell("eager", "fp32")).details() == {}


def test_amp_eager_cpu_cell_is_verified_and_records_bfloat16(tmp_path):
    result = run_cell(tmp_path, "eager", "amp")
    assert_verified(result, "amp")
    assert result.verification.max_rel_err > 1e-6  # really ran in bf16: not fp32's answer
    assert result.details["autocast_dtype"] == "bfloat16"
    assert "matmul_fp32_precision" not in result.details  # CUDA's flags: not on cpu


def amp_mlp_cell(backend: str):
    """The compiled rungs' amp cell: the MLP, whose Linear layers autocast to bfloat16 as
    mnist-cnn's do, in a program about half as long to compile on a small CPU."""
    return tiny_cell(backend, precision="amp")


@pytest.mark.slow
def test_amp_inductor_cpu_cell_is_verified_and_records_bfloat16(tmp_path):
    result = run_cell(tmp_path, "inductor", "amp", cell=amp_mlp_cell("inductor"))
    assert_verified(result, "amp")
    assert result.verification.max_rel_err > 1e-6
    assert result.details["autocast_dtype"] == "bfloat16"


@pytest.mark.slow
def test_amp_export_aot_cpu_cell_holds_the_autocast_in_its_program(tmp_path):
    result = run_cell(tmp_path, "export-aot", "amp", cell=amp_mlp_cell("export-aot"))
    assert_verified(result, "amp")
    assert result.verification.max_rel_err > 1e-6
    assert result.details["autocast_dtype"] == "bfloat16"


# -- CUDA (run by a GPU session; skipped here) -----------------------------------------------


@needs_cuda
@pytest.mark.parametrize("backend", ["eager", "torchscript"])
def test_fp32_cuda_cell_runs_ieee_fp32(tmp_path, restore_flags, backend):
    result = run_cell(tmp_path, backend, "fp32", "cuda")
    assert_verified(result, "fp32")
    assert result.details["matmul_fp32_precision"] == "ieee"
    assert result.details["cudnn_conv_fp32_precision"] == "ieee"


@needs_cuda
@pytest.mark.parametrize("backend", ["eager", "torchscript"])
def test_tf32_cuda_cell_records_tf32_and_is_verified(tmp_path, restore_flags, backend):
    result = run_cell(tmp_path, backend, "tf32", "cuda")
    assert_verified(result, "tf32")
    assert result.details["matmul_fp32_precision"] == "tf32"
    assert result.details["cudnn_conv_fp32_precision"] == "tf32"


@needs_cuda
def test_amp_cuda_cell_records_float16(tmp_path, restore_flags):
    result = run_cell(tmp_path, "eager", "amp", "cuda")
    assert_verified(result, "amp")
    assert result.details["autocast_dtype"] == "float16"
    assert result.details["cudnn_conv_fp32_precision"] == "ieee"  # autocast's fp32 ops


@needs_cuda
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["inductor", "export-aot"])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "amp"])
def test_compiled_rungs_on_cuda(tmp_path, restore_flags, backend, precision):
    result = run_cell(tmp_path, backend, precision, "cuda")
    assert_verified(result, precision)
    math = "tf32" if precision == "tf32" else "ieee"
    assert result.details["matmul_fp32_precision"] == math
    assert result.details["cudnn_conv_fp32_precision"] == math
    if precision == "amp":
        assert result.details["autocast_dtype"] == "float16"
