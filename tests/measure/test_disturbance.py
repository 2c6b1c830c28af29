"""The disturbance rule on synthetic windows, and wait_for_quiet's bound."""

from __future__ import annotations

import time

import pytest

from stackcost.measure.counters import TICK_S, Window
from stackcost.measure.disturbance import (
    THRESHOLD_CORES,
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
