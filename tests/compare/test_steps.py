"""Step detection on synthetic histories."""

from __future__ import annotations

import numpy as np

from stackcost.compare.steps import detect_steps


def test_clean_step_found_at_the_right_index():
    rng = np.random.default_rng(0)
    y = np.r_[np.full(12, 10.0), np.full(10, 12.0)] + rng.normal(0, 0.2, 22)
    steps = detect_steps(y)
    assert [s.index for s in steps] == [12]
    assert steps[0].change > 0.15


def test_pure_noise_yields_no_step():
    rng = np.random.default_rng(1)
    false = sum(bool(detect_steps(10 + rng.normal(0, 1.0, 30))) for _ in range(100))
    assert false <= 5


def test_two_steps_found():
    rng = np.random.default_rng(2)
    y = np.r_[np.full(10, 10.0), np.full(10, 13.0), np.full(10, 11.0)] + rng.normal(0, 0.3, 30)
    assert [s.index for s in detect_steps(y)] == [10, 20]


def test_short_and_constant_series():
    assert detect_steps([1.0, 2.0]) == []
    assert detect_steps([5.0] * 10) == []
    assert [s.index for s in detect_steps([1.0, 1.0, 1.0, 2.0, 2.0, 2.0])] == [3]


def test_min_change_ignores_tiny_steps():
    y = np.r_[np.full(10, 100.0), np.full(10, 100.5)] + np.tile([0.01, -0.01], 10)
    assert detect_steps(y, min_change=0.02) == []
