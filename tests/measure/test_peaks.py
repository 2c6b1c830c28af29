import os
import time

import pytest

from stackcost.env import cpu_info, onednn_bf16_capped
from stackcost.measure import peaks as peaks_mod
from stackcost.measure.peaks import Peaks, load_or_measure, measure_peaks, percent_of_peak


def test_quick_peaks_are_positive_and_bf16_follows_the_cpu_flags():
    import torch

    threads_before = torch.get_num_threads()
    p = measure_peaks(1, quick=True)
    assert torch.get_num_threads() == threads_before
    assert p.threads == 1 and p.quick
    assert p.fp32_gflops > 0 and p.stream_gbs > 0 and p.read_gbs and p.seconds > 0
    assert "read-only" in p.read_method
    # The curve by working set ends at the whole array, whose bandwidth is read_gbs.
    sizes = [b for b, _ in p.read_by_size]
    assert sizes == sorted(sizes) and sizes[-1] == 4 * peaks_mod.STREAM_N_QUICK
    assert p.read_by_size[-1][1] == p.read_gbs and all(g > 0 for _, g in p.read_by_size)
    assert "2 reads + 1 write" in p.stream_method and "torch.mm" in p.gemm_method
    has_bf16 = bool({"avx512_bf16", "amx_bf16"} & set(cpu_info()["flags"]))
    capped = onednn_bf16_capped(os.environ.get("ONEDNN_MAX_CPU_ISA"))
    assert (p.bf16_gflops is not None) == (has_bf16 and not capped)
    assert p.bf16_note
    if p.bf16_gflops is not None:
        assert p.bf16_gflops > 0
    else:
        assert ("capped" if has_bf16 else "lacks") in p.bf16_note


@pytest.mark.parametrize(
    ("cap", "native"), [(None, True), ("AVX2", False), ("AVX512_CORE_BF16", True)]
)
def test_bf16_is_a_peak_only_where_onednn_may_run_its_bf16_kernels(monkeypatch, cap, native):
    # A narrowed shell keeps the CPU's flags: torch's bf16 GEMM is oneDNN's, and capped it
    # falls back to a reference loop that took minutes (not a peak).
    monkeypatch.setattr(peaks_mod, "cpu_info", lambda: {"flags": ["avx2", "avx512_bf16"]})
    if cap:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    else:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    ok, note = peaks_mod._bf16_support()
    assert ok == native
    assert ("native" if native else "capped at AVX2") in note


def quiet_fake(monkeypatch) -> None:
    """A measurement that always reads as quiet: these tests are about the cache, and a
    real one taken while other work shares the machine is (rightly) not cached."""
    monkeypatch.setattr(
        peaks_mod,
        "measure_peaks",
        lambda t, quick=False: _fake(t, quick).model_copy(
            update={"other_busy_cores": 0.0, "measured_at": str(time.monotonic_ns())}
        ),
    )


def test_cache_round_trip(tmp_path, monkeypatch):
    quiet_fake(monkeypatch)
    first = load_or_measure("fp", 1, cache_dir=tmp_path, quick=True)
    assert (tmp_path / "fp-t1.json").is_file()
    t0 = time.perf_counter()
    second = load_or_measure("fp", 1, cache_dir=tmp_path, quick=True)
    assert time.perf_counter() - t0 < 0.05
    assert second == first  # same measured_at, same figures: read back, not re-measured


def test_corrupt_cache_is_measured_over(tmp_path, monkeypatch):
    quiet_fake(monkeypatch)
    path = tmp_path / "fp-t1.json"
    path.write_text("{not json")
    p = load_or_measure("fp", 1, cache_dir=tmp_path, quick=True)
    assert p.fp32_gflops > 0
    assert Peaks.model_validate_json(path.read_text()) == p


def _fake(threads: int, quick: bool) -> Peaks:
    return Peaks(
        threads=threads,
        fp32_gflops=100.0,
        bf16_gflops=None,
        bf16_note="n/a",
        stream_gbs=10.0,
        read_gbs=12.0,
        read_by_size=[(16 << 20, 40.0), (256 << 20, 12.0)],
        gemm_method="fake",
        stream_method="fake",
        measured_at=f"quick={quick}",
        seconds=0.0,
        quick=quick,
    )


def test_a_quick_cache_entry_does_not_satisfy_a_full_request(tmp_path, monkeypatch):
    monkeypatch.setattr(peaks_mod, "measure_peaks", lambda t, quick=False: _fake(t, quick))
    assert load_or_measure("fp", 2, cache_dir=tmp_path, quick=True).quick
    full = load_or_measure("fp", 2, cache_dir=tmp_path)
    assert not full.quick
    assert load_or_measure("fp", 2, cache_dir=tmp_path, quick=True) == full  # full serves both


def test_percent_of_peak():
    p = _fake(1, True)
    assert percent_of_peak(25.0, p, "fp32") == pytest.approx(25.0)
    assert percent_of_peak(25.0, p, "bf16") is None  # no bf16 peak
    assert percent_of_peak(25.0, p, "fp16") is None  # not measured
    with_bf16 = p.model_copy(update={"bf16_gflops": 400.0})
    assert percent_of_peak(100.0, with_bf16, "bf16") == pytest.approx(25.0)


def test_a_busy_measurement_is_used_but_not_cached(tmp_path):
    # Two processes spinning on this 2-core machine: the ceilings measured meanwhile are
    # too low, and must not outlive the load in the cache.
    import subprocess
    import sys

    spin = "import time\nend = time.time() + 20\nwhile time.time() < end:\n    pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        time.sleep(0.3)  # let them start spinning
        p = load_or_measure("fp", 1, cache_dir=tmp_path, quick=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert p.other_busy_cores is not None and p.other_busy_cores > 0.25 and p.busy
    assert not (tmp_path / "fp-t1.json").exists()


def test_store_and_read_back(tmp_path):
    quiet = _fake(1, False).model_copy(update={"other_busy_cores": 0.02})
    assert peaks_mod.store_peaks("fp", quiet, tmp_path) and not quiet.busy
    assert peaks_mod.cached_peaks("fp", 1, tmp_path) == quiet
    assert peaks_mod.cached_peaks("fp", 2, tmp_path) is None
    busy = quiet.model_copy(update={"other_busy_cores": 1.5, "measured_at": "later"})
    assert not peaks_mod.store_peaks("fp", busy, tmp_path)
    assert peaks_mod.cached_peaks("fp", 1, tmp_path) == quiet  # the quiet one stays


@pytest.mark.parametrize("missing", ["read_gbs", "read_by_size"])
def test_a_cache_without_the_read_peaks_is_measured_again(tmp_path, monkeypatch, missing):
    quiet_fake(monkeypatch)
    old = _fake(1, True).model_copy(update={missing: None, "measured_at": "old"})
    (tmp_path / "fp-t1.json").write_text(old.model_dump_json())
    again = load_or_measure("fp", 1, cache_dir=tmp_path, quick=True)
    assert again.measured_at != "old" and again.read_gbs == 12.0 and again.read_by_size


def test_a_step_is_held_to_the_read_bandwidth_of_its_working_set():
    curve = [(16 << 20, 50.0), (64 << 20, 40.0), (256 << 20, 20.0)]
    p = _fake(2, False).model_copy(update={"read_gbs": 20.0, "read_by_size": curve})
    assert p.read_ceiling_gbs(1 << 20) == 50.0  # below the smallest array: the cache's
    assert p.read_ceiling_gbs(32 << 20) == pytest.approx(45.0)  # halfway in log size
    assert p.read_ceiling_gbs(128 << 20) == pytest.approx(30.0)
    assert p.read_ceiling_gbs(1 << 30) == 20.0  # beyond the largest: memory's
    noisy = p.model_copy(update={"read_by_size": [(16 << 20, 50.0), (128 << 20, 18.0)]})
    assert noisy.read_ceiling_gbs(128 << 20) == 20.0  # never below memory's
    old = p.model_copy(update={"read_by_size": None})
    assert old.read_ceiling_gbs(1 << 20) == 20.0  # kept before the curve: read_gbs
    assert p.model_copy(update={"read_gbs": None}).read_ceiling_gbs(1 << 20) is None
