"""GPU peaks: the arithmetic on cpu at tiny sizes, the precision -> peak mapping, the
refusal where CUDA is absent, and (on a GPU only) a small real measurement."""

from __future__ import annotations

import json

import pytest
import torch

from stackcost.cli import main
from stackcost.measure import gpu_peaks as gp
from stackcost.measure.gpu_peaks import GpuPeaks, copy_peak, matmul_flops, matmul_peak
from stackcost.measure.peaks import Peaks, cell_peaks, percent_of_peak

CUDA = torch.cuda.is_available()


def gpu(**over) -> GpuPeaks:
    fields = dict(
        device="cuda:0",
        name="Test GPU",
        fp32_gflops=50_000.0,
        tf32_gflops=400_000.0,
        bf16_gflops=800_000.0,
        fp16_gflops=810_000.0,
        best_gflops={},
        copy_gbs=3_000.0,
        gemm_n=8192,
        copy_bytes=1 << 30,
        gemm_method="test",
        copy_method="test",
        torch="test",
        cuda="13.0",
        measured_at="2026-01-01T00:00:00+00:00",
        seconds=1.0,
    )
    return GpuPeaks(**{**fields, **over})


def test_matmul_flops_and_units_with_a_known_time(monkeypatch):
    # Every call "takes" 2 ms: 2 * 64^3 FLOPs / 2e-3 s = 0.262144 GFLOP/s.
    monkeypatch.setattr(gp, "time_calls", lambda fn, device, warmup, runs: [2.0] * runs)
    assert matmul_flops(64) == 2 * 64**3 == 524_288
    t = matmul_peak("cpu", 64, "fp32", warmup=0, runs=3)
    assert t.work == 524_288
    assert t.median_rate == pytest.approx(0.262144)
    assert t.best_rate == pytest.approx(0.262144)


def test_median_and_best_are_taken_from_the_calls():
    t = gp.Timed(ms=[4.0, 1.0, 2.0], work=2e9)  # 2 GFLOP per call
    assert t.median_rate == pytest.approx(1000.0)  # 2e9 / 2e-3 / 1e9
    assert t.best_rate == pytest.approx(2000.0)


def test_copy_counts_read_and_write(monkeypatch):
    monkeypatch.setattr(gp, "time_calls", lambda fn, device, warmup, runs: [1.0] * runs)
    t = copy_peak("cpu", 4096, warmup=0, runs=2)
    assert t.work == 2 * 4096  # read once, written once
    assert t.median_rate == pytest.approx(8192 / 1e-3 / 1e9)


@pytest.mark.parametrize("precision", gp.GPU_PRECISIONS)
def test_each_precision_runs_on_cpu_at_a_tiny_size(precision):
    t = matmul_peak("cpu", 32, precision, warmup=1, runs=3)
    assert len(t.ms) == 3 and all(ms > 0 for ms in t.ms)
    assert t.median_rate > 0 and t.best_rate >= t.median_rate


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="int8"):
        matmul_peak("cpu", 8, "int8")


def test_fp32_precision_is_set_inside_and_restored():
    m = torch.backends.cuda.matmul
    before = m.fp32_precision
    with gp.fp32_matmul_precision("tf32") as said:
        assert m.fp32_precision == "tf32" and '"tf32"' in said
    with gp.fp32_matmul_precision("fp32") as said:
        assert m.fp32_precision == "ieee" and '"ieee"' in said
    assert m.fp32_precision == before


@pytest.mark.parametrize(
    "precision, peak",
    [
        ("fp32", 50_000.0),
        ("tf32", 400_000.0),
        ("bf16", 800_000.0),
        ("amp", 810_000.0),  # autocast runs float16 on CUDA
        ("fp16", 810_000.0),
        ("int8", None),
        ("w4", None),
        ("nf4", None),  # a name nobody mapped: no peak, not an error
    ],
)
def test_a_cuda_cell_is_held_to_its_precisions_peak(precision, peak):
    p = gpu()
    got = p.peak(precision)
    if peak is None:
        assert got is None and percent_of_peak(1000.0, p, precision) is None
    else:
        assert got[1] == peak and got[0].startswith(gp.PEAK_OF_PRECISION[precision])
        assert "Test GPU" in got[0]
        assert percent_of_peak(peak / 4, p, precision) == pytest.approx(25.0)
    assert p.stream_gbs == 3_000.0  # the copy is the GPU's bandwidth roof


def test_cpu_peaks_keep_their_mapping():
    p = Peaks(threads=2, fp32_gflops=100.0, bf16_gflops=None, bf16_note="", stream_gbs=10.0,
              gemm_method="", stream_method="", measured_at="", seconds=0.0)  # fmt: skip
    assert p.peak("fp32") == ("fp32 GEMM, 2 threads", 100.0)
    assert p.peak("bf16") is None and p.peak("tf32") is None and p.peak("amp") is None
    with_bf16 = p.model_copy(update={"bf16_gflops": 400.0, "threads": 1})
    assert with_bf16.peak("amp") == ("bf16 GEMM, 1 thread", 400.0)
    assert with_bf16.peak("fp16") is None


def test_amp_is_held_to_the_dtype_autocast_runs_in():
    torch_common = pytest.importorskip("stackcost.backends.torch_common")
    autocast = getattr(torch_common, "AUTOCAST_DTYPE", None)
    if autocast is None:
        pytest.skip("no amp precision in this tree")
    short = {"float16": "fp16", "bfloat16": "bf16"}
    from stackcost.measure.peaks import CPU_PEAK_OF_PRECISION

    assert gp.PEAK_OF_PRECISION["amp"] == short[autocast["cuda"]]
    assert CPU_PEAK_OF_PRECISION["amp"] == short[autocast["cpu"]]


def test_cell_peaks_picks_the_device():
    cpu = Peaks(threads=2, fp32_gflops=100.0, bf16_gflops=None, bf16_note="", stream_gbs=10.0,
                gemm_method="", stream_method="", measured_at="", seconds=0.0)  # fmt: skip
    env = {"2": cpu.model_dump(mode="json"), "cuda": gpu().model_dump(mode="json")}
    assert cell_peaks(env, "cpu", 2) == cpu
    assert cell_peaks(env, "cuda", 2).name == "Test GPU"
    assert cell_peaks(env, "cpu", 1) is None
    assert cell_peaks({"2": cpu.model_dump(mode="json")}, "cuda", 2) is None
    assert cell_peaks({"cuda": {"fp32_gflops": "x"}}, "cuda", 2) is None  # unreadable
    assert cell_peaks(None, "cpu", 2) is None


@pytest.mark.skipif(CUDA, reason="checks the refusal where CUDA is absent")
def test_peaks_device_cuda_is_refused_without_cuda(capsys, tmp_path):
    code = main(["peaks", "--device", "cuda", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("stackcost: error: device 'cuda' is not available here")
    assert "use --device cpu" in err
    assert not list(tmp_path.iterdir())  # nothing measured, nothing cached


def test_an_unknown_device_is_refused(capsys):
    code = main(["peaks", "--device", "tpu"])
    err = capsys.readouterr().err
    assert code == 2 and err == "stackcost: error: device 'tpu' is not one of cpu, cuda\n"


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_gpu_peaks_measured_small_are_positive_and_ordered():
    p = gp.measure_gpu_peaks("cuda", quick=True)
    assert p.basis == "measured" and p.quick and p.device.startswith("cuda:")
    for precision in gp.GPU_PRECISIONS:
        assert getattr(p, f"{precision}_gflops") > 0
    assert p.copy_gbs > 0
    # Tensor cores: TF32 is not slower than full fp32, bf16 not slower than TF32 (loose).
    assert p.tf32_gflops >= 0.9 * p.fp32_gflops
    assert p.bf16_gflops >= 0.9 * p.tf32_gflops
    assert "CUDA event" in p.gemm_method and '"ieee"' in p.gemm_method


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_peaks_device_cuda_on_a_gpu(capsys, tmp_path):
    argv = ["peaks", "--device", "cuda", "--quick", "--json", "--cache-dir", str(tmp_path)]
    code = main(argv)
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["cuda"]["fp32_gflops"] > 0
    assert main(argv) == 0  # from the cache the second time, unless the GPU was busy
    again = json.loads(capsys.readouterr().out)["cuda"]
    assert again == out["cuda"] or out["cuda"]["other_processes"]


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_the_child_measurement_reads_back():
    from stackcost.measure.peaks import measure_gpu_peaks_in_child

    p = measure_gpu_peaks_in_child("cuda", quick=True)
    assert p.fp32_gflops > 0 and p.copy_gbs > 0


def test_measure_gpu_peaks_assembles_its_record_on_a_stand_in(monkeypatch):
    """The whole of measure_gpu_peaks on cpu, with CUDA's calls stood in for: checks the
    record it builds (fields, units, method text), not any GPU number."""
    import contextlib

    calls = []
    real_matmul, real_copy = gp.matmul_peak, gp.copy_peak

    def matmul(device, n, precision, **kw):
        calls.append((device, n, precision, torch.backends.cuda.matmul.fp32_precision))
        return real_matmul("cpu", 16, precision, warmup=0, runs=2)

    monkeypatch.setattr(gp, "cuda_unavailable_reason", lambda device="cuda": None)
    monkeypatch.setattr(gp, "_other_gpu_processes", lambda index: 0)
    monkeypatch.setattr(gp, "matmul_peak", matmul)
    monkeypatch.setattr(gp, "copy_peak", lambda device, nbytes: real_copy("cpu", 4096, 0, 2))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Stand-in GPU")
    p = gp.measure_gpu_peaks("cuda", quick=True)
    assert [c[:3] for c in calls] == [("cuda:0", gp.GEMM_N_QUICK, x) for x in gp.GPU_PRECISIONS]
    assert p.device == "cuda:0" and p.name == "Stand-in GPU" and p.quick
    assert p.other_processes == 0 and not p.busy
    assert set(p.best_gflops) == set(gp.GPU_PRECISIONS)
    assert p.fp32_gflops > 0 and p.copy_gbs > 0 and p.gemm_n == gp.GEMM_N_QUICK
    assert '"ieee"' in p.gemm_method and '"tf32"' in p.gemm_method
    assert "CUDA event" in p.copy_method
    assert GpuPeaks.model_validate_json(p.model_dump_json()) == p


def test_peaks_device_cuda_command_on_a_stand_in(monkeypatch, capsys, tmp_path):
    """`stackcost peaks --device cuda` end to end with the measurement stood in for:
    measured once, cached, read back, shown as a table."""
    measured = []

    def measure(device="cuda", quick=False):
        measured.append(quick)
        return gpu(quick=quick, other_processes=0)

    monkeypatch.setattr(gp, "cuda_unavailable_reason", lambda device="cuda": None)
    monkeypatch.setattr(gp, "measure_gpu_peaks", measure)
    argv = ["peaks", "--device", "cuda", "--cache-dir", str(tmp_path)]
    assert main([*argv, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["cuda"]["tf32_gflops"] == 400_000.0 and measured == [False]
    assert main([*argv, "--json"]) == 0 and measured == [False]  # from the cache
    assert json.loads(capsys.readouterr().out) == first
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Test GPU" in out and "400.0 TFLOP/s" in out and "3,000 GB/s" in out
    assert main([*argv, "--threads", "2"]) == 2
    assert "--threads applies to --device cpu only" in capsys.readouterr().err


def test_a_run_stores_the_gpu_peaks_beside_the_cpus(monkeypatch, tmp_path):
    from stackcost.execute import runner
    from stackcost.measure import peaks as peaks_mod

    cpu = Peaks(threads=1, fp32_gflops=100.0, bf16_gflops=None, bf16_note="", stream_gbs=10.0,
                gemm_method="", stream_method="", measured_at="", seconds=0.0)  # fmt: skip
    monkeypatch.setattr(peaks_mod, "load_or_measure", lambda fp, t: cpu)
    monkeypatch.setattr(peaks_mod, "load_or_measure_gpu", lambda fp, key: gpu())
    monkeypatch.setattr(runner, "_device_reason", lambda device: None)
    env = {"gpus": [{"name": "Test GPU", "uuid": "GPU-1"}]}
    out = runner.machine_peaks(env, [1], ["cpu", "cuda"])
    assert set(out) == {"1", "cuda"} and out["cuda"]["name"] == "Test GPU"
    assert runner.machine_peaks(env, [1], ["cpu"]).keys() == {"1"}

    def fails(fp, key):
        raise RuntimeError("cannot measure GPU peaks on cuda: test")

    monkeypatch.setattr(peaks_mod, "load_or_measure_gpu", fails)
    assert runner.machine_peaks(env, [1], ["cuda"]).keys() == {"1"}
    assert (
        env["gpu_peaks_error"] == "GPU peaks not measured: cannot measure GPU peaks on cuda: test"
    )


@pytest.mark.skipif(CUDA, reason="checks the child's refusal where CUDA is absent")
def test_the_child_measurement_says_why_not_without_cuda():
    from stackcost.measure.peaks import measure_gpu_peaks_in_child

    with pytest.raises(RuntimeError, match=r"^cannot measure GPU peaks on cuda: torch\.cuda"):
        measure_gpu_peaks_in_child("cuda", quick=True)
