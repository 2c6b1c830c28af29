"""Bad input: one line naming the value and what is allowed, exit 2, nothing written."""

import re
import subprocess
import sys

import pytest

from stackcost.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "resnet51"], "unknown model 'resnet51'"),
        (["run", "mlp", "--backends", "eager,tensorflow"], "unknown backend 'tensorflow'"),
        (["run", "mlp", "--batch-size", "0"], "batch size 0 must be a positive integer"),
        (["run", "mlp", "--batch-size", "-4"], "batch size -4"),
        (["run", "mlp", "--batch-size", "2.5"], "batch size '2.5' is not an integer"),
        (["run", "mlp", "--batch-size", "eight"], "batch size 'eight' is not an integer"),
        (["run", "resnet18", "--resolution", "16"], "resolution 16 is too small for resnet18"),
        (["run", "mnist-cnn", "--resolution", "20"], "resolution 20"),
        (["run", "mlp", "--precision", "fp8"], "unknown precision 'fp8'"),
        (["run", "mlp", "--init", "xavier"], "unknown init 'xavier'"),
        (["run", "mlp", "-o", "torchscript.colour=red", "--backends", "torchscript"], "colour"),
        (
            ["run", "--model", "no_such_module_xyz:make", "--input-shape", "3,8,8"],
            "no_such_module_xyz",
        ),
        (["run", "--model", "tests.factories:tiny"], "--input-shape"),
        (["list", "gadgets"], "gadgets"),
        (["run", "mlp", "--profile", "--sample-interval", "0"], "sample-interval '0' must be"),
        (["run", "mlp", "--sample-interval", "fast"], "sample-interval 'fast' is not a number"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    capsys, tmp_path, monkeypatch, argv, needle
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(__import__("tests.conftest").conftest.ROOT))
    code, out, err = run_cli(capsys, *argv, *(["--db", "x.db"] if argv[0] == "run" else []))
    assert code == 2
    assert needle in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.db").exists()


def test_unwritable_db_path(capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", "mlp", "--db", str(tmp_path / "nope" / "x.db"))
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1


def test_real_process_exit_code_and_no_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stackcost.cli",
            "run",
            "resnet50",
            "--batch-size",
            "0",
            "--db",
            str(tmp_path / "x.db"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "stackcost: error: batch size 0 must be a positive integer (>= 1)"
    assert not (tmp_path / "x.db").exists()


def test_list_backends_names_every_backend_and_reasons(capsys):
    code, out, _ = run_cli(capsys, "list", "backends")
    assert code == 0
    for name in ("eager", "torchscript", "inductor", "export-aot", "onnxruntime", "openvino"):
        assert name in out


def test_env_prints_the_record(capsys):
    import json

    code, out, _ = run_cli(capsys, "env")
    env = json.loads(out)
    assert code == 0 and env["versions"]["torch"] and env["cpu"]["logical_cores"] >= 1


def test_peaks_measures_once_then_reads_the_cache(capsys, tmp_path, monkeypatch):
    import json

    from stackcost.measure import peaks as peaks_mod

    real = peaks_mod.measure_peaks

    def quiet(threads: int, quick: bool = False):
        # A real measurement, read as quiet and full: this test is about the cache, and one
        # taken while other work shares the machine is (rightly) not cached. Its sizes are
        # the quick ones (test_peaks measures both): the full ones take seconds.
        return real(threads, quick=True).model_copy(
            update={"other_busy_cores": 0.0, "quick": False}
        )

    monkeypatch.setattr(peaks_mod, "measure_peaks", quiet)

    def peaks(*extra):
        code, out, _ = run_cli(
            capsys, "peaks", "--threads", "1", "--json", "--cache-dir", str(tmp_path), *extra
        )
        assert code == 0
        return json.loads(out)["1"]

    first = peaks()
    assert first["threads"] == 1 and first["fp32_gflops"] > 0 and first["stream_gbs"] > 0
    assert peaks() == first  # read back, not measured again
    again = peaks("--remeasure")
    assert again["measured_at"] != first["measured_at"]
    code, out, _ = run_cli(capsys, "peaks", "--threads", "1", "--cache-dir", str(tmp_path))
    assert code == 0 and "read: working set" in out and "1 thread(s), GB/s" in out
    for nbytes, gbs in again["read_by_size"]:
        assert re.search(rf"\b{nbytes / 2**20:,.0f} MiB\s*│\s*{gbs:.1f}\b", out), out
    code, _, err = run_cli(capsys, "peaks", "--threads", "0", "--cache-dir", str(tmp_path))
    assert (
        code == 2 and err.strip() == "stackcost: error: threads 0 must be a positive integer (>= 1)"
    )
