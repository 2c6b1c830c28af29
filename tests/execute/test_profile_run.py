"""`--profile` end to end: real workers, a real ONNX Runtime session, a real sampler."""

from __future__ import annotations

import pytest

import stackcost
from stackcost.measure import peaks
from stackcost.report.terminal.profile import percent_of_peak, profile_table

FAST = dict(protocol={"min_time_s": 0.2, "max_time_s": 1.0, "warmup_max_time_s": 0.3})


@pytest.fixture
def profiled_run(tmp_path, monkeypatch):
    # The peaks cache belongs to the user's machine; a test measures into its own.
    monkeypatch.setattr(peaks, "default_cache_dir", lambda: tmp_path / "peaks")
    # Measured as a run measures them, at the quick sizes (0.1 s, not 3 s or more here):
    # the point is that they are measured once, stored, and held to, not their values.
    full = peaks.measure_peaks
    monkeypatch.setattr(peaks, "measure_peaks", lambda threads, quick=False: full(threads, True))
    return stackcost.run(
        "resnet18",
        ["eager", "onnxruntime"],
        resolutions=[32],
        threads=[1],
        db=tmp_path / "x.db",
        profile=True,
        sample_interval_ms=5,
        **FAST,
    )


def test_every_cell_is_explained(profiled_run):
    assert "1" in profiled_run.env["peaks"]  # measured once, stored with the run
    for c in profiled_run.cells():
        assert c.valid, c.reason
        rep = c.repetitions[-1]
        b = rep.breakdown
        assert b is not None and b.check(), b  # parts + remainder = wall within 5%
        assert set(b.parts_ms) == {"kernels", "overhead"} and b.top_ops
        # resnet18: 1.82 GMACs at 224 px, so ~(32/224)^2 of 3.64 GFLOPs at 32 px, plus fc.
        assert rep.work is not None and 70e6 < rep.work.flops < 80e6
        assert rep.achieved_gflops and rep.achieved_gflops > 0
        assert percent_of_peak(rep, c, profiled_run.env) is not None
        tel = rep.telemetry
        assert tel is not None and tel.n_samples >= 2 and tel.cpu_util_cores_mean > 0
        e = rep.energy
        assert e is not None and e.joules_per_sample > 0
        # The label follows the source: a counter, or a stated estimate, never unlabelled.
        assert (e.method == "measured") == (not e.source.startswith("estimate"))
    assert profile_table(profiled_run) is not None


def test_without_profile_nothing_is_profiled(tmp_path):
    run = stackcost.run("mlp", ["eager"], threads=[1], db=tmp_path / "y.db", **FAST)
    rep = run.cells()[0].repetitions[-1]
    assert rep.breakdown is rep.work is rep.telemetry is rep.energy is None
    assert "peaks" not in run.env and profile_table(run) is None
