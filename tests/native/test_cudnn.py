"""The cuDNN rung: unavailable without a GPU (saying what is missing), compiles where nvcc and
the cuDNN/cuBLAS headers are, refuses in one line without a device, and on a GPU agrees
with eager (the GPU test runs only where torch sees one)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from stackcost.axes import PRECISION_TOLERANCE
from stackcost.backends import load_backend
from stackcost.backends.cudnn import CUDNNBackend
from stackcost.cell import Cell, ModelRef
from stackcost.native.build import Build, cuda_libraries, toolchain_problem
from tests.native.conftest import MODELS, QUICK, _cached_build

GPU = torch.cuda.is_available()


@pytest.fixture(scope="module")
def cudnn_build(tmp_path_factory) -> Iterator[Build]:
    # Skips, with the reason, where nvcc or the cuDNN/cuBLAS headers are missing (as on CI,
    # which installs neither wheel).
    yield from _cached_build("cudnn", tmp_path_factory)


def test_declares_what_it_runs():
    b = load_backend("cudnn")
    assert isinstance(b, CUDNNBackend) and b.not_yet_run_on_gpu
    assert b.capabilities.devices == {"cuda"} and b.capabilities.modes == {"infer"}
    assert "fp32" in b.capabilities.precisions
    assert ("tf32" in b.capabilities.precisions) == ("tf32" in PRECISION_TOLERANCE)
    ref, resolution = MODELS["resnet18"]
    cpu = Cell(model=ref, backend="cudnn", resolution=resolution)
    assert b.why_not(cpu).startswith("device cpu not supported")
    mlp = Cell(model=ModelRef(name="mlp", num_classes=10, in_channels=1), backend="cudnn")
    assert b.why_not(mlp.model_copy(update={"device": "cuda"})).startswith(
        "no C++ definition of mlp"
    )


@pytest.mark.skipif(GPU, reason="this machine has a CUDA device")
def test_unavailable_here_with_the_missing_piece():
    a = load_backend("cudnn").available()
    assert not a.ok
    assert any(
        piece in a.reason for piece in ("nvcc", "cuDNN", "cuBLAS", "cmake", "no CUDA device")
    ), a.reason


def test_missing_nvcc_is_named(monkeypatch, tmp_path):
    import stackcost.native.build as build

    monkeypatch.setattr(build, "CUDA_HOME", tmp_path)
    problem = toolchain_problem("cudnn", lambda tool: None if tool == "nvcc" else f"/bin/{tool}")
    assert problem is not None and problem.startswith("nvcc (the CUDA toolkit) not found")


def test_missing_headers_name_the_wheels(monkeypatch, tmp_path):
    import stackcost.native.build as build

    monkeypatch.setattr(build, "_package_dirs", lambda *modules: [])
    monkeypatch.setattr(build, "SYSTEM_INCLUDE", (tmp_path,))
    monkeypatch.setattr(build, "SYSTEM_LIB", (tmp_path,))
    monkeypatch.setattr(build, "cuda_toolkit_root", lambda which=None: tmp_path)
    problem = toolchain_problem("cudnn", lambda tool: f"/bin/{tool}")
    assert problem is not None
    assert problem.startswith("cuDNN headers (cudnn_version.h), cuDNN library")
    assert problem.endswith("not found: pip install nvidia-cudnn-cu13 nvidia-cublas")
    a = load_backend("cudnn").available()
    assert not a.ok and a.reason == problem


def test_no_device_is_the_reason_once_the_toolchain_is_there(monkeypatch):
    import stackcost.native.build as build

    monkeypatch.setattr(build, "toolchain_problem", lambda target, which=None: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    a = load_backend("cudnn").available()
    assert not a.ok and a.reason.startswith("no CUDA device (torch.cuda.is_available() is False)")


def test_list_backends_shows_the_mark(monkeypatch, capsys):
    from stackcost.cli import main

    monkeypatch.setenv("COLUMNS", "400")
    assert main(["list", "backends"]) == 0
    out = capsys.readouterr().out
    # Only cudnn declares it; the mark sits under its description or reason.
    assert out.count("not yet run on a GPU") == 1
    rows = out.splitlines()
    at = next(i for i, row in enumerate(rows) if " cudnn " in row)
    assert any("not yet run on a GPU" in row for row in rows[at : at + 6])


def test_wheels_are_found_by_import():
    libs = cuda_libraries()
    if isinstance(libs, str):
        pytest.skip(libs)
    assert (libs.cudnn_include / "cudnn.h").is_file() and (
        libs.cublas_include / "cublas_v2.h"
    ).is_file()
    assert libs.cudnn_library.name.startswith("libcudnn.so")
    assert libs.cublas_library.name.startswith("libcublas.so")


def test_compiles(cudnn_build):
    assert cudnn_build.executable.is_file() and cudnn_build.executable.name == "stackcost_cudnn"


def test_echo_round_trips_a_tensor_file(cudnn_build, tmp_path):
    from stackcost.native.tensors import read_tensors, write_tensors

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    write_tensors(tmp_path / "in.scw", {"x": x})
    out = subprocess.run(
        [str(cudnn_build.executable), "echo", str(tmp_path / "in.scw"), str(tmp_path / "out.scw")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(read_tensors(tmp_path / "out.scw")["x"], x)


@pytest.mark.skipif(GPU, reason="this machine has a CUDA device")
@pytest.mark.parametrize(
    "request_args",
    [["run", "threads=1"], ["run", "threads=1", "profile_iters=10", "profile_out=/nonexistent/p"]],
    ids=["run", "profile"],
)
def test_without_a_device_the_program_says_so_in_one_line(cudnn_build, request_args):
    out = subprocess.run(
        [str(cudnn_build.executable), *request_args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: no CUDA device: cudaGetDeviceCount returned "), lines[0]


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
@pytest.mark.parametrize("model", list(MODELS))
def test_matches_eager_on_the_gpu(cudnn_build, tmp_path: Path, model):
    from stackcost.execute.worker import run_task
    from stackcost.result import MEASURED_STATUSES
    from stackcost.scenarios.task import RepetitionTask

    ref, resolution = MODELS[model]
    cell = Cell(
        model=ref, backend="cudnn", device="cuda", batch_size=2, resolution=resolution, threads=1
    )
    result = run_task(RepetitionTask(cell=cell, protocol=QUICK, workdir=str(tmp_path)))
    assert result.status in MEASURED_STATUSES, (result.reason, result.log_tail)
    assert result.verification.ok, result.verification
    d = result.details
    assert d["cudnn_api"] == "legacy" and d["algo_choice"] == "heuristic" and d["layout"] == "NCHW"
    assert d["math"] == "fp32" and d["conv_math_type"] == "CUDNN_FMA_MATH"
    assert d["bn_folded"] is (model == "resnet18")  # mnist-cnn has no BatchNorm
    assert all(c["algo"] and c["workspace_bytes"] >= 0 for c in d["convs"])
    assert d["event_samples"] == len(result.samples_ns) and d["event_median_ms"] > 0
    assert d["device_alloc_peak_bytes"] > 0


def test_the_layer_timeline_becomes_a_breakdown_naming_algorithms(tmp_path: Path):
    """stackcost_cudnn's profiled-pass file (its shape, written here by hand) read by the
    breakdown the oneDNN rung uses: slowest layers with their convolution algorithm."""
    import json

    iters, us = 10, 1000  # ns per microsecond
    steps = [
        ("conv1", "convolution", "IMPLICIT_PRECOMP_GEMM", 300),
        ("maxpool", "pooling", "max", 40),
        ("layer1.0.conv1", "convolution", "WINOGRAD_NONFUSED", 500),
        ("fc", "fully connected", "cublasSgemm, bias", 20),
    ]
    timeline = {
        "method": "per-layer CUDA events on the stream (stackcost_cudnn)",
        "note": "4 layers per iteration, each between two CUDA events",
        "iters": iters,
        "iteration_ns": 1000 * us * iters,
        "steps": [
            {"name": n, "kind": k, "impl": i, "ns": t * us * iters}
            | (
                {"algo": i, "workspace_bytes": 4096, "math": "CUDNN_FMA_MATH"}
                if k[0] == "c"
                else {}
            )
            for n, k, i, t in steps
        ],
    }
    (tmp_path / "profile.json").write_text(json.dumps(timeline))
    answer = {
        "profile_path": tmp_path / "profile.json",
        "details": {"profile_iters": iters, "profile_wall_ns": 1100 * us * iters},
    }
    b = load_backend("cudnn").timeline_breakdown(answer, unprofiled_ms=1.0)
    assert b.method.startswith("per-layer CUDA events") and b.iters == iters
    assert b.parts_ms["kernels"] == pytest.approx(0.86)
    assert b.parts_ms["overhead"] == pytest.approx(0.14)
    assert b.top_ops[0].name == "convolution (WINOGRAD_NONFUSED)" and b.top_ops[0].calls == iters
    assert b.notes[0] == timeline["note"]
    assert b.notes[1] == (
        "slowest layers: layer1.0.conv1 0.500 ms (45%, WINOGRAD_NONFUSED), "
        "conv1 0.300 ms (27%, IMPLICIT_PRECOMP_GEMM), maxpool 0.040 ms (4%)"
    )


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
def test_profiled_run_names_layer_times_and_algorithms(cudnn_build, tmp_path: Path, capsys):
    """`stackcost run resnet18 --device cuda --backends cudnn --profile`: the stored
    breakdown names the slowest layers with their algorithm, from per-layer CUDA events."""
    from stackcost.api import load_runs
    from stackcost.cli import main

    db = tmp_path / "p.db"
    argv = ["run", "resnet18", "--device", "cuda", "--backends", "cudnn", "--profile"]
    quick = ["--min-time", "0.05", "--max-time", "2", "--threads", "1", "--quiet"]
    assert main([*argv, *quick, "--db", str(db)]) == 0, capsys.readouterr()
    (run,) = load_runs(db, [])
    ((cell, rep),) = run.records
    assert cell.backend == "cudnn" and rep.status in ("ok", "disturbed"), (rep.status, rep.reason)
    b, d = rep.breakdown, rep.details
    assert b is not None and b.iters == d["profile_iters"] > 0
    assert b.method.startswith("per-layer CUDA events")
    assert 0 < b.parts_ms["kernels"] <= b.wall_ms and b.parts_ms["overhead"] >= 0
    assert b.top_ops[0].name.startswith("convolution (")
    algos = {c["algo"] for c in d["convs"]}
    slowest = next(n for n in b.notes if n.startswith("slowest layers: "))
    assert any(a in slowest for a in algos), (slowest, algos)


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
@pytest.mark.skipif("tf32" not in PRECISION_TOLERANCE, reason="no tf32 precision on the axis")
def test_tf32_cell_runs_tensor_core_math(cudnn_build, tmp_path: Path):
    from stackcost.execute.worker import run_task
    from stackcost.result import MEASURED_STATUSES
    from stackcost.scenarios.task import RepetitionTask

    ref, resolution = MODELS["resnet18"]
    cell = Cell(
        model=ref,
        backend="cudnn",
        device="cuda",
        precision="tf32",
        batch_size=2,
        resolution=resolution,
        threads=1,
    )
    result = run_task(RepetitionTask(cell=cell, protocol=QUICK, workdir=str(tmp_path)))
    assert result.status in MEASURED_STATUSES, (result.reason, result.log_tail)
    assert result.verification.ok, result.verification
    d = result.details
    assert d["math"] == "tf32" and d["cublas_math"] == "CUBLAS_TF32_TENSOR_OP_MATH"


def test_needs_nothing_but_the_program(cudnn_build):
    # The binary finds cuDNN and cuBLAS through its own RPATH: no LD_LIBRARY_PATH.
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not installed")
    out = subprocess.run(
        [readelf, "-d", str(cudnn_build.executable)], capture_output=True, text=True
    )
    assert "(RPATH)" in out.stdout and "libcudnn.so" in out.stdout
