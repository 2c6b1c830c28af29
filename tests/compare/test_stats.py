"""The verdict statistics on synthetic samples: quiet on noise, sharp on a 10% shift.

Model: a repetition is N iid log-normal samples at 10% CV, times a per-process factor
(log-normal, 1% sd) standing for what differs between processes. "The default number
of samples" is 3 repetitions x 100 samples: what `repeats: 3` gives for a step of about
10 ms under the default protocol (min_time_s = 1 s).
"""

from __future__ import annotations

import numpy as np
import pytest

from stackcost.compare.stats import compare_metric, min_attainable_p, status_verdict, worst

PAIRS, REPS, N, CV, DRIFT = 300, 3, 100, 0.10, 0.01


def side(rng: np.random.Generator, shift: float = 0.0, reps: int = REPS, n: int = N):
    return [
        (1 + shift) * np.exp(rng.normal(0, DRIFT)) * rng.lognormal(0, CV, n) for _ in range(reps)
    ]


def rate(shift: float, seed: int, **kw) -> float:
    rng = np.random.default_rng(seed)
    hits = [
        compare_metric("latency", side(rng, **kw), side(rng, shift, **kw)).verdict == "regressed"
        for _ in range(PAIRS)
    ]
    return sum(hits) / PAIRS


def test_false_alarms_at_most_5_percent_on_pure_noise():
    assert rate(0.0, seed=1) <= 0.05


def test_detects_a_10_percent_shift_at_least_95_percent():
    assert rate(0.10, seed=2) >= 0.95


def test_single_repetition_falls_back_to_samples_and_stays_quiet():
    assert rate(0.0, seed=3, reps=1, n=200) <= 0.05


def test_improvement_and_throughput_direction():
    rng = np.random.default_rng(4)
    faster = compare_metric("latency", side(rng), side(rng, -0.2))
    assert faster.verdict == "improved"
    # Throughput: higher is better, so a drop is the regression.
    lower = compare_metric(
        "throughput", [[100.0], [101.0], [99.0]], [[80.0], [81.0], [79.0]], higher_is_better=True
    )
    assert lower.verdict == "regressed" and lower.worse_change > 0


def test_large_but_overlapping_change_is_noisy_not_regressed():
    res = compare_metric("peak_memory", [[100.0], [150.0], [90.0]], [[120.0], [95.0], [140.0]])
    assert res.verdict in ("noisy", "unchanged")
    assert compare_metric("x", [[1.0]], [[2.0]]).verdict == "noisy"  # untestable


def test_repetition_test_takes_over_with_enough_repetitions():
    assert min_attainable_p(3, 3) > 0.05 >= min_attainable_p(4, 4)
    rng = np.random.default_rng(5)
    res = compare_metric("latency", side(rng, reps=5), side(rng, 0.3, reps=5))
    assert res.decided_by == "repetitions" and res.verdict == "regressed"


def test_status_and_worst():
    assert status_verdict(None, True) == "new"
    assert status_verdict(True, None) == "missing"
    assert status_verdict(True, False) == "newly failing"
    assert status_verdict(False, True) == "fixed"
    assert status_verdict(True, True) is None
    assert worst(["unchanged", "noisy", "regressed"]) == "regressed"


@pytest.mark.parametrize("bad", [[], [[]]])
def test_empty_side_is_an_error(bad):
    with pytest.raises(ValueError):
        compare_metric("latency", bad, [[1.0, 2.0]])
