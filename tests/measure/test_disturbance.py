"""The disturbance rule on synthetic windows, and wait_for_quiet's bound."""

from __future__ import annotations

import time

import pytest

from stackcost.measure.counters import TICK_S, Window
from stackcost.measure.disturbance import (
    THRESHOLD_CORES,
    Disturbance,
    assess,
    tick_slack_cores,
    wait_for_quiet,
)

SECOND = 1_000_000_000


def window(seconds: float, own_cores: float, others_cores: float) -> Window:
    own = own_cores * seconds
    return Window(0, int(seconds * SECOND), own, own + others_cores * seconds)


def test_others_cores_is_system_busy_minus_own_cpu_over_the_window():
    d = assess(window(2.0, 2.0, 1.0), cpus=2)
    assert d.others_cores == pytest.approx(1.0) and d.own_cores == pytest.approx(2.0)
    assert d.disturbed and "1.00 cores" in d.reason()


def test_a_quiet_window_is_not_disturbed():
    d = assess(window(2.0, 2.0, 0.02), cpus=2)
    assert not d.disturbed and d.others_cores == pytest.approx(0.02)


def test_the_threshold_is_a_quarter_core_plus_the_tick_slack():
    slack = tick_slack_cores(2.0, 2)
    assert slack == pytest.approx(2 * 2 * TICK_S / 2.0)
    assert not assess(window(2.0, 1.0, THRESHOLD_CORES + slack * 0.9), cpus=2).disturbed
    assert assess(window(2.0, 1.0, THRESHOLD_CORES + slack * 1.1), cpus=2).disturbed


def test_a_short_window_is_never_falsely_disturbed_by_tick_rounding():
    # 50 ms on 2 CPUs: two ticks per CPU of rounding is 0.8 core of apparent "others".
    d = assess(window(0.05, 1.0, 0.8), cpus=2)
    assert not d.disturbed and d.threshold_cores > 0.8


def test_no_system_counter_means_no_assessment():
    assert assess(Window(0, SECOND, 1.0, None)) is None


def test_wait_for_quiet_returns_within_its_bound():
    t = time.monotonic()
    others = wait_for_quiet(window_s=0.1, max_wait_s=0.3)
    assert time.monotonic() - t < 1.5
    assert others is None or others >= 0


# -- steal, context switches and frequency over the same window ------------------------


def stolen_window(seconds: float, own: float, others: float, steal: float, **kw) -> Window:
    """A window whose CPUs' busy time (steal included, as /proc/stat counts it) holds our
    own, other processes' and the hypervisor's share, each in cores."""
    busy = (own + others + steal) * seconds
    return Window(0, int(seconds * SECOND), own * seconds, busy, steal * seconds, **kw)


def test_steal_is_kept_apart_from_other_processes():
    d = assess(stolen_window(2.0, 1.0, 0.05, 0.6), cpus=2)
    assert d.steal_cores == pytest.approx(0.6) and d.others_cores == pytest.approx(0.05)


def test_steal_above_the_threshold_disturbs_and_the_reason_names_it():
    d = assess(stolen_window(2.0, 1.0, 0.0, 0.6), cpus=2)
    assert d.disturbed
    assert d.reason().startswith("disturbed: the hypervisor's steal took 0.60 cores")


def test_steal_is_judged_by_the_others_threshold_with_the_same_tick_slack():
    threshold = THRESHOLD_CORES + tick_slack_cores(2.0, 2)
    below = assess(stolen_window(2.0, 1.0, 0.0, threshold * 0.95), cpus=2)
    above = assess(stolen_window(2.0, 1.0, 0.0, threshold * 1.05), cpus=2)
    assert not below.disturbed and above.disturbed


def test_steal_and_others_together_disturb_as_others_alone_did():
    # Before steal was read apart, both were "others" (busy minus own): 0.4 cores, disturbed.
    d = assess(stolen_window(2.0, 1.0, 0.2, 0.2), cpus=2)
    assert d.disturbed and d.others_cores == pytest.approx(0.2)
    assert "other processes used 0.20 cores and the hypervisor's steal took 0.20" in d.reason()


def test_no_steal_keeps_the_reason_as_it_was():
    d = assess(stolen_window(2.0, 1.0, 1.0, 0.0), cpus=2)
    assert d.steal_cores == 0.0 and d.disturbed
    assert d.reason().startswith("disturbed: other processes used 1.00 cores during the timed loop")


def test_a_steal_within_the_tick_rounding_is_not_named():
    # One 10 ms tick over 1 s: 0.01 core, less than the 0.04 core the ticks may be off.
    d = assess(stolen_window(1.0, 1.0, 1.0, 0.01), cpus=2)
    assert d.disturbed and d.steal_cores == pytest.approx(0.01)
    assert "steal" not in d.reason()


def test_unread_steal_counts_inside_others_as_before():
    d = assess(Window(0, 2 * SECOND, 2.0, 2.0 + 2 * 0.6), cpus=2)
    assert d.steal_cores is None and d.others_cores == pytest.approx(0.6) and d.disturbed


def test_involuntary_switches_are_a_count_and_a_rate_that_decide_nothing():
    w = stolen_window(2.0, 1.0, 0.0, 0.0, involuntary_switches=5000)
    d = assess(w, cpus=2)
    assert d.involuntary_switches == 5000 and d.involuntary_switches_per_s == pytest.approx(2500)
    assert not d.disturbed


def test_frequency_at_both_edges_is_context():
    w = stolen_window(2.0, 1.0, 0.0, 0.0, cpu_mhz_start=3000.04, cpu_mhz_end=1200.0)
    d = assess(w, cpus=2)
    assert (d.cpu_mhz_start, d.cpu_mhz_end) == (3000.0, 1200.0) and not d.disturbed


def test_unread_fields_are_left_out_of_the_stored_json():
    """A result stored before these fields (or without the counters) writes as it did."""
    old = assess(window(2.0, 1.0, 0.0), cpus=2)
    assert old is not None and old.steal_cores is None and old.cpu_mhz_start is None
    assert set(old.model_dump(mode="json")) == {
        "others_cores",
        "own_cores",
        "window_s",
        "threshold_cores",
        "loadavg_1m",
        "disturbed",
        "attempts",
    }
    new = assess(stolen_window(2.0, 1.0, 0.0, 0.1, involuntary_switches=3), cpus=2)
    dumped = new.model_dump(mode="json")
    assert dumped["steal_cores"] == pytest.approx(0.1) and dumped["involuntary_switches"] == 3
    assert "cpu_mhz_start" not in dumped
    assert Disturbance.model_validate_json(new.model_dump_json()) == new


def test_a_native_programs_window_carries_the_new_counters_and_an_old_one_not():
    from stackcost.backends.native import native_window

    old = {"start_ns": 0, "end_ns": SECOND, "cpu_s": 1.0, "system_busy_s": 1.5}
    w = native_window({"window": old})
    assert w is not None and w.steal_s is None and w.involuntary_switches is None
    new = {**old, "steal_s": 0.4, "involuntary_switches": 7, "cpu_mhz_start": 2400.5}
    d = assess(native_window({"window": {**new, "cpu_mhz_end": None}}), cpus=1)
    assert d.steal_cores == pytest.approx(0.4) and d.others_cores == pytest.approx(0.1)
    assert d.involuntary_switches == 7 and d.cpu_mhz_start == 2400.5 and d.cpu_mhz_end is None
