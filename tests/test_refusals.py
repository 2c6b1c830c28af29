"""Bad flags are refused before anything is written: exit 2, one line, no traceback,
and an existing store left byte-for-byte as it was (files: tests/test_refusals_files.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from stackcost.cli import main
from stackcost.env import cores
from stackcost.store.database import Store
from tests.test_refusals_files import refused, state

RUN = ["run", "mlp", "--backends", "eager", "--resolution", "8", "--threads", "1", "--quiet"]
FACTORY = ["run", "--model", "tests.factories:tiny", "--input-shape", "4", "--quiet"]
TRAIN = ["train", "mlp", "--backends", "eager", "--threads", "1", "--limit", "64", "--quiet"]
HUGE = "9" * 5000  # more digits than int() reads


def run(*extra: str) -> list[str]:
    return [*RUN, *extra]


CASES = [
    # integers a store cannot hold, axes that would explode before expanding
    (run("--batch-size", "99999999999999999999999"), "too large"),
    (run("--batch-size", "1..1000000000+1"), "expands to 1,000,000,000 values"),
    (run("--batch-size", "1..99999999999999999999999x2"), "too large"),
    (run("--batch-size", HUGE), "is not an integer"),
    (run("--batch-size", f"1..{HUGE}"), "too long to read"),
    (run("--resolution", "8..100000+1"), "at most 10,000"),
    (run("--seed", "99999999999999999999999"), "too large"),
    (run("--repeats", "1000000000"), "repeats"),
    (run("--repeats", "0"), "repeats 0 must be a positive integer"),
    # NaN and infinities in every float
    (run("--tolerance", "nan"), "tolerance 'nan' must be a finite number"),
    (run("--tolerance", "inf"), "must be a finite number"),
    (run("--max-time", "1e309"), "max-time '1e309' must be a finite number"),
    (run("--min-time", "-inf"), "min-time"),
    (run("--timeout", "nan"), "timeout 'nan' must be a finite number"),
    (run("--target-ci", "inf"), "target-ci 'inf' must be a finite number"),
    # options that do not apply
    (run("--input-shape", "3,8,8"), "--input-shape does not apply to zoo model 'mlp'"),
    ([*FACTORY, "--resolution", "8"], "--resolution does not apply to a factory"),
    ([*FACTORY, "--in-channels", "3"], "--in-channels 3 does not apply"),
    (run("--seq-len", "128"), "--seq-len does not apply to mlp (its size axes: --resolution)"),
    (run("--samples", "0"), "samples 0 must be a positive integer"),
    (run("-c", "num_hidden_layers=2"), "-c/--config applies to Hugging Face models"),
    (run("--head", "classification"), "--head applies to Hugging Face models"),
    (["run", "bert-base", "--head", "lm"], "unknown head 'lm' (allowed: base, classification, causal-lm)"),
    (["run", "bert-base", "--seq-len", "4096"], "seq_len 4096 is too large for bert-base"),
    (["run", "bert-base", "-c", "layers"], "config 'layers' must look like key=value"),
    (["run", "hf:Bert!"], "is not of the form hf:<model_type>"),
    (["run", "--model", "tests.factories:tiny"], "give its input shape"),
    (run("--max-batch", "64"), "max-batch applies only with find-max-batch"),
    # the stop rule over processes
    (run("--max-repeats", "5"), "max-repeats applies only with cell-ci"),
    (run("--cell-ci", "2"), "cell-ci '2': allowed a fraction in (0, 1)"),
    (run("--cell-ci", "0.02", "--max-repeats", "2"), "max-repeats 2 is below the 3 processes"),
    (run("--cell-ci", "0.02", "--find-max-batch"), "cell-ci does not combine with find-max-batch"),
    (["ab", "mlp", "--base", "python", "--cand", "python", "--cell-ci", "0.02"], "are run's stop rule"),
    # serve: durations need units, counts and forms are checked, its knobs need it
    (["run", "llama-tiny", "--scenario", "serve", "--serve-time", "5"], "serve-time '5' needs a unit"),
    (["run", "llama-tiny", "--scenario", "serve", "--serve-budget", "nan s"], "serve-budget"),
    (["run", "llama-tiny", "--scenario", "serve", "--serve-rates", "-1"], "serve-rates '-1' must be greater than -1"),
    (["run", "llama-tiny", "--scenario", "serve", "--lengths", "gaussian"], "lengths 'gaussian' is not a form"),
    (["run", "llama-tiny", "--scenario", "generate", "--serve-time", "5s"], "apply only with --scenario serve"),
    (["run", "mlp", "--scenario", "serve"], "needs a decoder with its LM head"),
    (run("--sample-interval", "5"), "sample-interval applies only with profile"),
    # threads beyond the CPUs this process may use
    ([*RUN[:-3], "--threads", str(cores() + 1), "--quiet"], "more than the"),
    # user code that cannot be a backend or a model, refused in a probe process
    (run("--backends", "os:system"), "not a stackcost Backend subclass"),
    (run("--backends", "os:path"), "not a stackcost Backend subclass"),
    (run("--backends", "tests.execute.exiting_backend:X"), "sys.exit(3)"),
    (run("--backends", "no_such_module_xyz:Backend"), "no_such_module_xyz"),
    (["run", "--model", "no_such_pkg_xyz:make", "--input-shape", "4"], "no_such_pkg_xyz"),
    (["run", "--model", "tests.factories:nothing_here", "--input-shape", "4"], "no attribute"),
    (["run", "--model", "not a path:x y", "--input-shape", "4"], "is not of the form"),
    # session flags
    (run("--on-disturbed", "ignore"), "--on-disturbed 'ignore' is not a policy"),
    (run("--inherit-env", "A=B"), "is not an environment variable name"),
    (run("--inherit-env", "1X"), "is not an environment variable name"),
    # training
    ([*TRAIN, "--lr", "nan"], "learning rate 'nan' must be a positive number"),
    ([*TRAIN, "--epochs", "99999999999999999999999"], "too large"),
    ([*TRAIN, "--threads", str(cores() + 1)], "more than the"),
    ([*TRAIN, "--on-disturbed", "x"], "is not a policy"),
    ([*TRAIN, "--backends", "os:system"], "not a stackcost Backend subclass"),
    ([*TRAIN, "--seq-len", "16"], "--seq-len does not apply to mlp"),
    (["train", "bert-base", "--dataset", "digits"],
     "--dataset digits: bert-base is fed input_ids (int64), attention_mask (int64), not images"),
    (["train", "bert-base", "--head", "base"], "--head base: training needs --head classification"),
    (["train", "bert-base", "--seq-len", "9999"], "seq_len 9999 is too large for bert-base"),
    (["train", "dlrm-small"], "dlrm-small has no classification head"),
    (["train", "examples.token_model:WORKLOAD", "--dataset", "cifar10"], "not images"),
    (["train", "mlp", "--dataset", "imagenet"], "unknown dataset 'imagenet'"),
    (["train", "mlp", "--dataset", "digits", "--num-classes", "3"],
     "--num-classes 3: digits has 10 classes"),
    # values checked where they enter, not in a worker: backend options by their schema
    (run("--backends", "onnxruntime", "-o", "onnxruntime.opt_level=<nonsense>"),
     "option onnxruntime.opt_level='<nonsense>' is not allowed (allowed: disable, basic,"),
    (run("--backends", "inductor", "-o", "inductor.mode=fastest"), "inductor.mode='fastest'"),
    (run("--backends", "torchscript", "-o", "torchscript.optimize=true", "-o",
         "torchscript.freeze=false"), "torchscript.optimize=true needs torchscript.freeze=true"),
    # Hugging Face overrides: sizes positive, weights that fit, inputs stackcost can feed
    (["run", "hf:bert", "-c", "hidden_size=-4"],
     "hf:bert: config hidden_size=-4: a size must be a positive integer"),
    (["run", "bert-base", "-c", "hidden_size=999999996"],
     "bert-base (hf:bert): 4.9e+19 parameters, 1.83e+11 GiB of fp32 weights, more than"),
    (["run", "hf:clip"], "hf:clip pairs a text tower with its image one and needs both inputs"),
    # Workloads: dtypes from the supported set, dimensions it declares
    (["run", "tests.hostile.unknown_dtype:WORKLOAD"],
     "input 'x': dtype 'float8' is not supported (allowed: float32, int64, int32, bool)"),
    (["run", "tests.hostile.undeclared_axis:WORKLOAD"],
     "input 'ids' names dimension 'seq_len', which it does not declare"),
    # scenario bounds: a unit required, a range, a negative value after a space
    (run("--scenario", "server", "--latency-bound", "0.05"),
     "latency-bound '0.05' needs a unit: 0.05ms or 0.05s"),
    (run("--scenario", "server", "--loadgen-min-duration", "2"), "needs a unit: 2ms or 2s"),
    (run("--scenario", "server", "--latency-bound", "1e30ms"),
     "latency-bound '1e30ms' must be a positive duration of at most 3600s"),
    (run("--scenario", "server", "--latency-bound", "-5ms"),
     "latency-bound '-5ms' must be a positive duration"),
    # training options bounded before anything is allocated
    ([*TRAIN, "--num-classes", "1000000000"], "--num-classes 1000000000 is out of range"),
    (["train", "bert-base", "--num-classes", "1000000000"], "out of range (allowed: 1..100,000)"),
    (run("--in-channels", "100000000"), "--in-channels 100000000 is out of range"),
    # thresholds finite, relative ones in (0, 1): NaN counts everything, inf nothing
    (["compare", "a", "b", "--threshold", "nan"], "--threshold 'nan' must be a finite number in (0, 1)"),
    (["compare", "a", "b", "--threshold", "0"], "--threshold '0' must be a finite number in (0, 1)"),
    (["compare", "a", "b", "--threshold-metric", "latency=1e309"],
     "--threshold-metric latency '1e309' must be a finite number in (0, 1)"),
    (["compare", "a", "b", "--alpha", "inf"], "--alpha 'inf' must be a finite number"),
    (["compare", "a", "b", "--between-run-spread", "nan"], "--between-run-spread 'nan'"),
    (["history", "--min-change", "inf"], "--min-change 'inf' must be a finite number in [0, 10)"),
    (["history", "--alpha", "nan"], "--alpha 'nan' must be a finite number in (0, 1)"),
    (["ab", "mlp", "--base", "python", "--cand", "python", "--threshold", "inf"],
     "--threshold 'inf' must be a finite number in (0, 1)"),
    (run("--import-timeout", "nan"), "--import-timeout 'nan' must be a finite number"),
    ([*TRAIN, "--batch-size", "128"],
     "--batch-size 128 is more than the 64 training samples --limit 64 keeps: no full batch"),
    (["report", "--baseline", "eagr"], "unknown backend 'eagr' (allowed: eager,"),
]  # fmt: skip


@pytest.fixture
def store_dir(tmp_path, monkeypatch):
    """An existing store with one stored run, in a directory the refusal must not touch."""
    monkeypatch.chdir(tmp_path)
    with Store(tmp_path / "s.db") as store:
        store.create_run({"models": []}, {"hostname": "h"}, "stackcost run mlp")
    return tmp_path


@pytest.mark.parametrize("argv, needle", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_bad_flags_are_refused_and_the_store_is_untouched(capsys, store_dir, argv, needle):
    err = refused([*argv, "--db", str(store_dir / "s.db")], capsys, store_dir)
    assert needle in err, err


# The key, its line and the value as stackcost names them; why it is wrong is pydantic's
# wording, which a pydantic release may change, so it is not asserted.
@pytest.mark.parametrize(
    "protocol, needle",
    [
        ("{max_time_s: .inf}", "spec.yaml:4: protocol.max_time_s = inf"),
        ("{target_ci: .nan}", "spec.yaml:4: protocol.target_ci = nan"),
        ("{min_time_s: 1e309}", "spec.yaml:4: protocol.min_time_s = '1e309'"),
    ],
)
def test_a_spec_files_infinite_protocol_is_refused(capsys, store_dir, protocol, needle):
    spec = store_dir / "spec.yaml"
    spec.write_text(f"models: [mlp]\nbackends: [eager]\nthreads: 1\nprotocol: {protocol}\n")
    err = refused(["sweep", str(spec), "--db", str(store_dir / "s.db")], capsys, store_dir)
    assert needle in err, err


def test_a_corrupt_mnist_file_is_one_line(capsys, tmp_path):
    data = tmp_path / "mnist"
    data.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        (data / name).write_bytes(b"\x00\x00\x08\x03garbage that is not an IDX file")
    (tmp_path / "out").mkdir()
    argv = ["train", "mnist-cnn", "--dataset", "mnist", "--data-dir", str(data)]
    err = refused([*argv, "--db", str(tmp_path / "out" / "s.db")], capsys, tmp_path / "out")
    assert "mnist" in err.lower()


def test_a_bisect_timeout_must_be_finite(capsys, store_dir):
    argv = ["bisect", "--versions", "a==1,a==2", "--command", "true", "--timeout", "nan"]
    err = refused(argv, capsys, store_dir)
    assert "--timeout 'nan' must be a finite number in (0, 604800]" in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="here a CUDA cell can run")
def test_a_run_where_no_cell_can_run_is_refused_before_a_run_exists(capsys, store_dir):
    argv = run(
        "--device", "cuda", "--backends", "eager,onnxruntime", "--db", str(store_dir / "s.db")
    )
    err = refused(argv, capsys, store_dir)
    assert "no cell can run here (2 cells): 2 unavailable: no CUDA device here" in err, err


def test_a_hanging_import_is_refused_at_the_import_timeout_naming_the_flag(capsys, store_dir):
    started = time.monotonic()
    argv = ["run", "tests.hostile.hangs:WORKLOAD", "--import-timeout", "2"]
    err = refused([*argv, "--db", str(store_dir / "s.db")], capsys, store_dir)
    assert "did not finish in 2 s" in err and "--import-timeout SECONDS" in err, err
    assert time.monotonic() - started < 10


def test_report_to_a_file_that_fails_on_write_is_one_line(capsys, store_dir):
    argv = ["report", "--db", str(store_dir / "s.db"), "-o", "/dev/full"]
    err = refused(argv, capsys, store_dir)
    assert "-o '/dev/full' could not be written (No space left on device)" in err, err


def test_an_export_to_a_stdout_that_fails_on_write_is_one_line(store_dir):
    before = state(store_dir)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "stackcost.cli", "report", "--format", "json", "--db", "s.db"],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=store_dir, timeout=120,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr == "stackcost: error: stdout could not be written (No space left on device)\n"
    )
    assert state(store_dir) == before


def test_an_unexpected_exception_is_one_line_and_says_where_to_report_it(
    capsys, store_dir, monkeypatch
):
    """The guard for bugs: exit 1, the type, where the traceback went; no store touched.
    The hostile cases above never reach it: `refused` wants "stackcost: error:"."""
    from stackcost.commands import env

    def broken(args, console):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(env, "run", broken)
    before = state(store_dir)
    assert main(["env"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stackcost: internal error: RuntimeError: a bug over two lines"), err
    assert err.count("\n") == 1 and "Traceback" not in err and "report it" in err
    crash = Path(err.split("traceback in ")[1].split(")")[0])
    assert "RuntimeError: a bug" in crash.read_text()
    crash.unlink()
    assert state(store_dir) == before


def test_no_traceback_reaches_the_terminal_from_the_real_entry_point(tmp_path):
    before = state(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "stackcost.cli", *run("--batch-size", "1..1000000000+1")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr and state(tmp_path) == before
