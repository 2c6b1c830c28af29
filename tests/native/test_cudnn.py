"""The cuDNN rung: unavailable without a GPU (saying what is missing), compiles where nvcc and
the cuDNN/cuBLAS headers are, refuses in one line without a device (run, --profile, train),
and on a GPU agrees with eager, profiles per layer and trains (the GPU tests run only where
torch sees one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from stackcost.axes import PRECISION_TOLERANCE
from stackcost.backends import load_backend
from stackcost.backends.cudnn import CUDNNBackend
from stackcost.cell import Cell, ModelRef, TrainConfig
from stackcost.native.build import Build, cuda_libraries, toolchain_problem
from tests.conftest import cached_build
from tests.native.conftest import MODELS, QUICK

GPU = torch.cuda.is_available()


@pytest.fixture(scope="module")
def cudnn_build(native_cache) -> Build:
    # Skips, with the reason, where nvcc or the cuDNN/cuBLAS headers are missing (as on CI,
    # which installs neither wheel).
    return cached_build("cudnn", native_cache)


def test_declares_what_it_runs():
    b = load_backend("cudnn")
    assert isinstance(b, CUDNNBackend) and b.not_yet_run_on_gpu
    assert b.capabilities.devices == {"cuda"} and b.capabilities.modes == {"infer", "train"}
    assert "fp32" in b.capabilities.precisions
    assert ("tf32" in b.capabilities.precisions) == ("tf32" in PRECISION_TOLERANCE)
    ref, resolution = MODELS["resnet18"]
    cpu = Cell(model=ref, backend="cudnn", resolution=resolution)
    assert b.why_not(cpu).startswith("device cpu not supported")
    mlp = Cell(model=ModelRef(name="mlp", num_classes=10, in_channels=1), backend="cudnn")
    assert b.why_not(mlp.model_copy(update={"device": "cuda"})).startswith(
        "no C++ definition of mlp"
    )
    train = cpu.model_copy(update={"device": "cuda", "mode": "train", "train": TrainConfig()})
    assert b.why_not(train) is None
    if "tf32" in PRECISION_TOLERANCE:
        tf32 = train.model_copy(update={"precision": "tf32"})
        assert b.why_not(tf32) == "precision tf32: stackcost_cudnn trains in fp32 only"


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
    [
        ["run", "threads=1"],
        ["run", "threads=1", "profile_iters=10", "profile_out=/nonexistent/p"],
        ["train", "threads=1", "weights=/nonexistent/w.scw", "batch=8", "epochs=1"],
    ],
    ids=["run", "profile", "train"],
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


def _train_args_of(backend_name: str, device: str, tmp_path: Path, monkeypatch) -> dict:
    """The key=values NativeBackend's train path hands `<program> train` for a tiny
    mnist-cnn problem, the program replaced by a stub that records them."""
    from types import SimpleNamespace

    from tests.native.train_reference import problem

    p = problem(arch="mnist-cnn", resolution=28, channels=1, n=16, n_test=4, batch=8)
    cell = p.cell.model_copy(update={"backend": backend_name, "device": device})
    backend = load_backend(backend_name)
    exe = tmp_path / "stackcost_x"
    build = SimpleNamespace(executable=exe, key="k", compiled=False, seconds=0.0)
    monkeypatch.setattr(backend, "build", lambda cache_dir=None: build)
    seen = {}

    def invoke(executable, command, args, timeout_s):
        seen.update(command=command, **args)
        return {"details": {}}

    monkeypatch.setattr(backend, "_invoke", invoke)
    workdir = tmp_path / backend_name
    backend.run_native_train(p.model, p.train, p.test, cell, SimpleNamespace(workdir=workdir))
    # The files' paths differ by work folder only: compare their names.
    return {k: (v.name if isinstance(v, Path) else v) for k, v in seen.items()}


def test_train_arguments_are_onednns_plus_the_device(tmp_path: Path, monkeypatch):
    onednn = _train_args_of("onednn", "cpu", tmp_path, monkeypatch)
    cudnn = _train_args_of("cudnn", "cuda", tmp_path, monkeypatch)
    assert onednn["command"] == "train" and onednn["device"] == "cpu"
    assert cudnn == {**onednn, "device": "cuda"}
    assert {"weights", "train_data", "test_data", "batch", "epochs", "optimizer", "lr"} <= set(
        cudnn
    )
    assert cudnn["family"] == "mnist-cnn" and cudnn["weights"] == "weights.scw"


def test_train_answer_records_the_first_losses(monkeypatch, tmp_path: Path):
    """The program's per-step losses become the records the train table compares with
    eager's (as many as the train scenario records)."""
    from types import SimpleNamespace

    import stackcost.backends.native as native
    from stackcost.scenarios.train import FIRST_LOSSES

    assert native.FIRST_LOSSES == FIRST_LOSSES
    losses = [2.5 - 0.1 * i for i in range(12)]
    epoch = {
        "epoch": 1, "complete": True, "steps": 12, "train_samples": 96,
        "train_loss_sum": sum(losses), "train_correct": 40, "train_ns": 12_000_000,
        "loader_ns": 1_000_000, "step_ns": 10_000_000, "eval_samples": 20,
        "eval_correct": 10, "eval_loss_sum": 30.0, "eval_ns": 500_000,
        "copy_ns": 240_000, "copy_bytes_per_batch": 8 * 28 * 28 * 4,
    }  # fmt: skip
    answer = {
        "cold_ns": 5_000_000, "samples_ns": [800_000] * 11, "losses": losses, "diverged": "",
        "epochs": [epoch], "peak_rss_bytes": 2 << 20, "baseline_rss_bytes": 1 << 20,
        "process_s": 0.1, "details": {"build_s": 0.0, "export_s": 0.0},
    }  # fmt: skip
    backend = load_backend("cudnn")
    monkeypatch.setattr(backend, "run_native_train", lambda *a, **k: answer)
    data = SimpleNamespace(dataset=SimpleNamespace(images=None, labels=None))
    ref, resolution = MODELS["mnist-cnn"]
    cell = Cell(model=ref, backend="cudnn", device="cuda", mode="train", train=TrainConfig(),
                resolution=resolution)  # fmt: skip
    run = backend.train_repetition(None, {"train": data, "test": data}, cell, None)
    assert run.loop["first_losses"] == losses[:FIRST_LOSSES]
    assert run.cold_ns == 5_000_000 and len(run.samples_ns) == 11
    (record,) = run.epochs
    assert record.copy_device == "cuda" and record.eval_accuracy == 0.5
    assert record.copy_bytes_per_batch == 25088 and record.copy_pinned is False
    assert record.copy_ms_per_batch == pytest.approx(0.02)  # 0.24 ms over 12 steps


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
@pytest.mark.parametrize("arch", ["resnet18", "mnist-cnn"])
def test_first_training_losses_agree_with_eager(cudnn_build, tmp_path: Path, arch):
    """stackcost_cudnn train against eager (CPU, fp32) from the same weights and batches:
    the train table's tolerances (report/frames/train.py): step 1 within 1e-4, steps 2-3
    within 5e-2; mnist-cnn with dropout off against an eager model with p = 0."""
    from stackcost.native.training import train_args, write_train_files
    from stackcost.report.frames.train import TOLERANCES, relative
    from tests.native.test_onednn_train import mnist_problem
    from tests.native.train_reference import eager_losses, problem

    p = problem(lr=0.01) if arch == "resnet18" else mnist_problem(lr=0.01)
    reference, _ = eager_losses(p, max_steps=3)
    files = write_train_files(tmp_path, p.model.state_dict(), p.train, p.test, p.orders)
    args = {**train_args(p.cell, files, max_steps=3), "device": "cuda", "dropout": "off"}
    cmd = [str(cudnn_build.executable), "train", *(f"{k}={v}" for k, v in args.items())]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    import json

    answer = json.loads(out.stdout.strip().splitlines()[-1])
    diffs = relative(answer["losses"][:3], reference)
    assert len(diffs) == 3 and all(d <= t for d, t in zip(diffs, TOLERANCES, strict=True)), diffs
    d = answer["details"]
    assert d["cudnn_api"] == "legacy" and d["bn_mode"] == "CUDNN_BATCHNORM_SPATIAL"
    assert d["conv_math_type"] == "CUDNN_FMA_MATH" and d["device_alloc_peak_bytes"] > 0
    assert all(c["fwd"]["algo"] and c["bwd_filter"]["algo"] for c in d["convs"])
    assert d["convs"][0]["bwd_data"] is None  # the input takes no gradient


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
def test_train_cli_records_the_cudnn_level_beside_eager(cudnn_build, tmp_path: Path, capsys):
    """`stackcost train mnist-cnn --device cuda --dataset digits --backends eager,cudnn`:
    both levels train; mnist-cnn's dropout draws per framework, so the loss comparison
    says why it compares nothing rather than passing or failing."""
    from stackcost.api import load_runs
    from stackcost.cli import main
    from stackcost.report.frames.train import agreement, eager_twin

    db = tmp_path / "t.db"
    argv = ["train", "mnist-cnn", "--device", "cuda", "--dataset", "digits"]
    argv += ["--backends", "eager,cudnn", "--epochs", "1", "--limit", "512", "--threads", "1"]
    assert main([*argv, "--db", str(db)]) == 0, capsys.readouterr()
    (run,) = load_runs(db, [])
    cells = run.cells()
    results = {cell.backend: rep for cell, rep in run.records}
    rep = results["cudnn"]
    assert rep.status in ("ok", "disturbed"), (rep.status, rep.reason)
    assert len(rep.epochs) == 1 and rep.epochs[0].eval_accuracy is not None
    assert len(rep.details["first_losses"]) >= 3
    level = next(c for c in cells if c.cell.backend == "cudnn")
    a = agreement(level, eager_twin(level, cells))
    assert a.stochastic and "Dropout" in a.why, a.label()


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
def test_resnet18_learns_digits(cudnn_build, tmp_path: Path, capsys):
    """The issue's acceptance: resnet18 on digits, 5 epochs, >= 95% held-out accuracy, and
    its first losses agree with eager's within the train table's tolerances."""
    from stackcost.api import load_runs
    from stackcost.cli import main
    from stackcost.report.frames.train import agreement, eager_twin

    db = tmp_path / "r.db"
    argv = ["train", "resnet18", "--device", "cuda", "--dataset", "digits"]
    argv += ["--backends", "eager,cudnn", "--epochs", "5", "--threads", "1"]
    assert main([*argv, "--db", str(db)]) == 0, capsys.readouterr()
    (run,) = load_runs(db, [])
    cells = run.cells()
    rep = {cell.backend: r for cell, r in run.records}["cudnn"]
    assert rep.status in ("ok", "disturbed"), (rep.status, rep.reason)
    assert len(rep.epochs) == 5 and rep.epochs[-1].eval_accuracy >= 0.95, rep.epochs[-1]
    level = next(c for c in cells if c.cell.backend == "cudnn")
    a = agreement(level, eager_twin(level, cells))
    assert a.agrees, a.label()
