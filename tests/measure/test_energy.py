"""Energy from telemetry samples: measured only from a counter covering the window."""

from __future__ import annotations

import pytest

from stackcost.measure.energy import (
    CPU_WATTS_MAX_PER_CORE,
    MixedEnergyMethods,
    PowerModel,
    combine,
    energy_from_telemetry,
    fit_power_throughput,
)

T0 = 10**12
MS = 1_000_000
WRAP_UJ = 1_000_000  # a small max_energy_range_uj so the series wraps inside the window


def series(n: int = 101, watts: float = 10.0, rapl: bool = True, gpu_mj: bool = False):
    """A sample every 10 ms: one busy core, a RAPL package drawing `watts` that starts
    near its wrap point, optionally a GPU energy counter at 200 W."""
    out = []
    for k in range(n):
        s: dict = {"t": T0 + k * 10 * MS, "cpu": 0.01 * k, "sys": 0.01 * k, "self": 0.0}
        if rapl:
            uj = (900_000 + int(watts * 1e6 * 0.01 * k)) % WRAP_UJ
            s["rapl"] = {"package-0": [uj, WRAP_UJ], "dram": [k, WRAP_UJ]}
        if gpu_mj:
            s["gpu"] = [{"index": 0, "energy_mj": 2000 * k, "power_mw": 200_000, "util": 90}]
        out.append(s)
    return out


WINDOW = (T0 + 55 * MS, T0 + 955 * MS)  # 0.9 s, edges between samples


def test_measured_from_rapl_across_wraparound():
    samples = series()
    assert samples[5]["rapl"]["package-0"][0] < samples[0]["rapl"]["package-0"][0]  # wrapped
    e = energy_from_telemetry(samples, WINDOW, processed_samples=90)
    assert e.method == "measured" and e.device == "cpu"
    assert e.source.startswith("RAPL package-0")  # dram is not the CPU's
    assert e.joules == pytest.approx(9.0)  # 10 W x 0.9 s
    assert e.watts == pytest.approx(10.0) and e.seconds == pytest.approx(0.9)
    assert e.joules_per_sample == pytest.approx(0.1) and e.samples_per_joule == pytest.approx(10)


def test_estimated_without_a_counter_names_its_model():
    e = energy_from_telemetry(series(rapl=False), WINDOW, processed_samples=90, cores=2)
    assert e.method == "estimated" and e.note == ""
    # 2 cores x 1 W idle + (5 - 1) W x 1 busy core = 6 W
    assert e.watts == pytest.approx(6.0) and e.joules == pytest.approx(5.4)
    assert "estimate" in e.source and f"P_max = {CPU_WATTS_MAX_PER_CORE:g} W" in e.source

    mine = PowerModel(unit="core", max_watts=12.0, idle_watts=0.0)
    e2 = energy_from_telemetry(series(rapl=False), WINDOW, 90, cores=2, model=mine)
    assert e2.watts == pytest.approx(12.0) and "P_max = 12 W" in e2.source


def test_counter_in_part_of_the_window_is_not_measured():
    samples = series()
    for s in samples[50:60]:
        del s["rapl"]  # the zone stopped reading for a while
    e = energy_from_telemetry(samples, WINDOW, processed_samples=90, cores=2)
    assert e.method == "estimated"
    assert "missing in 10 of" in e.note

    # Samples ending before the window does: not a measurement of the whole window either.
    e = energy_from_telemetry(series(n=60), WINDOW, processed_samples=90, cores=2)
    assert e.method == "estimated" and "cover" in e.note


def test_gpu_counter_measured_and_power_only_estimated():
    e = energy_from_telemetry(series(gpu_mj=True), WINDOW, 90, device="cuda:0")
    assert e.method == "measured" and e.source == "NVML total energy counter (GPU 0)"
    assert e.joules == pytest.approx(180.0)  # 2 J per 10 ms over 0.9 s

    samples = series(gpu_mj=True)
    for s in samples:
        s["gpu"][0]["energy_mj"] = None  # pre-Volta: power readings, no counter
    e = energy_from_telemetry(samples, WINDOW, 90, device="cuda:0")
    assert e.method == "estimated" and "power readings" in e.source
    assert e.watts == pytest.approx(200.0)

    e = energy_from_telemetry(series(), WINDOW, 90, device="cuda:0")  # no NVML at all
    assert e.method == "estimated" and "assumed 100%" in e.source


def test_combine_adds_and_refuses_to_mix_methods():
    measured = energy_from_telemetry(series(), WINDOW, 90)
    both = combine([measured, measured])
    assert both.method == "measured" and both.joules == pytest.approx(18.0)
    assert both.samples == 180 and both.watts == pytest.approx(10.0)

    estimated = energy_from_telemetry(series(rapl=False), WINDOW, 90, cores=2)
    with pytest.raises(MixedEnergyMethods, match="measured.*estimated") as info:
        combine([measured, estimated])
    assert isinstance(info.value, ValueError)


def test_fit_on_an_exact_line():
    slope, intercept, r2 = fit_power_throughput([(x, 2.0 * x + 3.0) for x in (1, 2, 5, 9)])
    assert slope == pytest.approx(2.0) and intercept == pytest.approx(3.0)
    assert r2 == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        fit_power_throughput([(1.0, 2.0), (1.0, 3.0)])


def test_a_flat_counter_is_not_a_measurement():
    samples = series(watts=0.0)
    e = energy_from_telemetry(samples, WINDOW, processed_samples=90, cores=2)
    assert e.method == "estimated" and "did not advance" in e.note


def test_estimate_takes_the_targets_own_busy_cores():
    e = energy_from_telemetry(series(rapl=False), WINDOW, 90, cores=2, busy_cores=2.0)
    # 2 cores x 1 W idle + (5 - 1) W x 2 busy cores = 10 W, not the samples' 1 core
    assert e.watts == pytest.approx(10.0) and "its own counters" in e.source


def test_a_counter_slower_than_the_window_is_not_a_measurement():
    """NVML's energy counter updates every ~10-100 ms: a window it crossed only a few times
    is estimated, with the reason; a longer one is measured."""

    def slow(n: int) -> list:
        samples = series(n=n, gpu_mj=True)
        for k, s in enumerate(samples):
            s["gpu"][0]["energy_mj"] = 2000 * (k // 10) * 10  # updates every 100 ms
        return samples

    short = (T0 + 55 * MS, T0 + 455 * MS)  # 0.4 s: 4 updates
    e = energy_from_telemetry(slow(101), short, 40, device="cuda:0")
    assert e.method == "estimated"
    assert "advanced 4 times over the 400 ms window" in e.note and "--min-time" in e.note
    long = (T0 + 55 * MS, T0 + 1955 * MS)  # 1.9 s: 19 updates
    e = energy_from_telemetry(slow(201), long, 190, device="cuda:0")
    assert e.method == "measured" and e.joules == pytest.approx(380.0, rel=0.1)
