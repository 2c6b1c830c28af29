import math
import statistics

import pytest

from stackcost.report.frames import tidy
from stackcost.store.runs import RunResult
from tests.report.conftest import BACKENDS, BATCHES, REPEATS, RESOLUTIONS, build_store


def _cell(summ, backend="eager", batch=2, res=64):
    rows = summ[
        (summ["backend"] == backend)
        & (summ["batch_size"] == batch)
        & (summ["resolution"] == res)
        & (summ["model"] == "mlp")
    ]
    assert len(rows) == 1
    return rows.iloc[0]


def test_frame_has_one_row_per_repetition(runs):
    df = tidy.frame(runs)
    grid = len(BACKENDS) * len(BATCHES) * len(RESOLUTIONS) * REPEATS
    assert len(df) == grid + REPEATS + 3  # + wrong cell's repeats, failed, evil ok, skipped
    assert set(df["run_id"]) == {runs[0].run_id}
    # A "wrong" repetition recorded a cold start, but it is not a valid timing.
    wrong = df[df["status"] == "wrong"]
    assert wrong[list(tidy.TIMING_COLUMNS)].isna().all().all()


def test_cell_aggregates_over_repetitions(runs):
    summ = tidy.summary(runs)
    row = _cell(summ)
    cell = next(
        c
        for c in runs[0].cells()
        if c.cell.backend == "eager" and c.cell.batch_size == 2 and c.cell.resolution == 64
    )
    medians = [r.stats.median_ms for r in cell.repetitions]
    assert row["median_ms"] == pytest.approx(statistics.median(medians))
    assert row["band_low_ms"] == pytest.approx(min(medians))
    assert row["band_high_ms"] == pytest.approx(max(medians))
    throughputs = [r.throughput for r in cell.repetitions]
    assert row["throughput_per_s"] == pytest.approx(statistics.median(throughputs))
    assert row["peak_rss_bytes"] == max(r.memory.peak_rss_bytes for r in cell.repetitions)
    assert math.isnan(row["allocator_peak_bytes"])  # CPU: no device memory
    assert row["n_repetitions"] == REPEATS and row["n_valid"] == REPEATS


def test_invalid_cells_carry_status_and_reason_but_no_timing(runs):
    summ = tidy.summary(runs)
    by_status = {s: summ[summ["status"] == s] for s in ("wrong", "failed", "skipped")}
    assert all(len(v) == 1 for v in by_status.values())
    for rows in by_status.values():
        assert not rows["valid"].any()
        assert rows[list(tidy.CELL_TIMINGS)].isna().all().all()
        assert rows[["time_ratio", "cpu_mem_ratio"]].isna().all().all()
    assert by_status["skipped"].iloc[0]["reason"] == "oom at batch 8"
    assert by_status["wrong"].iloc[0]["max_rel_err"] == 0.5  # the error stays visible


def test_worst_status_wins():
    assert tidy.severity("wrong") > tidy.severity("failed") > tidy.severity("ok")
    assert tidy.severity("something-new") > tidy.severity("wrong")
    assert not tidy.is_valid("skipped") and tidy.is_valid("unstable")


def test_ratios_to_selectable_baseline(runs):
    summ = tidy.summary(runs)
    ts = _cell(summ, "torchscript")
    assert ts["time_ratio"] == pytest.approx(0.6, rel=0.05)
    assert _cell(summ)["time_ratio"] == pytest.approx(1.0)
    assert math.isnan(ts["device_mem_ratio"])  # no device memory on CPU
    flipped = tidy.summary(runs, baseline="torchscript")
    assert _cell(flipped)["time_ratio"] == pytest.approx(1 / 0.6, rel=0.05)


def test_ratio_summary_is_a_geometric_mean(runs):
    summ = tidy.ratio_summary(tidy.summary(runs))
    time = summ[(summ["series"] == "torchscript") & (summ["metric"] == "time_ratio")].iloc[0]
    assert time["n"] == len(BATCHES) * len(RESOLUTIONS)
    assert time["low"] <= time["geomean"] <= time["high"]
    device = summ[summ["metric"] == "device_mem_ratio"]
    assert device["geomean"].isna().all()


def test_best_batches_and_why_the_search_stopped(runs):
    best = tidy.best_batches(tidy.summary(runs), tidy.wants_batch_search(runs))
    ts64 = best[(best["series"] == "torchscript") & (best["resolution"] == 64)].iloc[0]
    assert ts64["best_batch"] == 4  # throughput grows with batch in the synthetic data
    assert ts64["stopped_by"].startswith("skipped at batch 8: oom at batch 8")


def test_sweeps_need_two_points(runs, single_batch_runs):
    assert len(tidy.sweeps(tidy.summary(runs), "batch_size")) == len(RESOLUTIONS)
    single = tidy.summary(single_batch_runs)
    assert tidy.sweeps(single, "batch_size") == []
    assert "Only one batch size (1)" in tidy.sweep_note(single, "batch_size")


def test_throughput_tables_per_workload(runs):
    tables = tidy.throughput_tables(tidy.summary(runs))
    tables = [t for t in tables if t.title.startswith("mlp")]
    assert [t.title for t in tables] == ["mlp · res 32 px", "mlp · res 64 px"]
    assert list(tables[0].table.index) == ["eager", "torchscript"]  # baseline first
    assert list(tables[0].table.columns) == list(BATCHES)


def test_empty_and_multi_run(tmp_path):
    assert tidy.summary([]).empty
    loaded = []
    for name in ("a", "b"):
        store, run_id = build_store(tmp_path / f"{name}.db")
        with store:
            loaded.append(RunResult.from_store(store, run_id))
    summ = tidy.summary(loaded)
    assert summ["run_id"].nunique() == 2
    # Same backend in two runs: the legend tells them apart by run.
    assert any(s.startswith("eager · ") for s in summ["series"])
    ratios = summ[summ["backend"] == "eager"]["time_ratio"].dropna()
    assert ratios.tolist() == pytest.approx([1.0] * len(ratios))  # baseline from its own run


def test_device_memory_ratio_on_gpu(tmp_path):
    store, run_id = build_store(tmp_path / "gpu.db", device="cuda")
    with store:
        summ = tidy.summary([RunResult.from_store(store, run_id)])
    ts = _cell(summ[summ["device"] == "cuda"], "torchscript")
    assert ts["device_mem_ratio"] == pytest.approx(0.6 * ts["cpu_mem_ratio"], rel=0.01)
