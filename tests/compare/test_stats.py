"""The stored-run verdict statistics on synthetic samples: quiet on noise and on
run-level drift, sharp on a shift beyond the between-run spread.

Model: a repetition is N iid log-normal samples at 10% CV, times a per-process factor
(log-normal, 1% sd) standing for what differs between processes, times a per-run factor
(`run_drift`) that all repetitions of one run share: the machine's state minutes apart.
"The default number of samples" is 3 repetitions x 100 samples: what `repeats: 3` gives
for a step of about 10 ms under the default protocol (min_time_s = 1 s).
"""

from __future__ import annotations

import numpy as np
import pytest

from stackcost.compare.stats import (
    BETWEEN_RUN_SPREAD,
    MIN_REPETITIONS,
    compare_metric,
    min_attainable_p,
    status_verdict,
    worst,
)

PAIRS, REPS, N, CV, DRIFT = 300, 3, 100, 0.10, 0.01


def side(
    rng: np.random.Generator,
    shift: float = 0.0,
    reps: int = REPS,
    n: int = N,
    run_drift: float = 0.0,
):
    run = np.exp(rng.normal(0, run_drift))
    return [
        (1 + shift) * run * np.exp(rng.normal(0, DRIFT)) * rng.lognormal(0, CV, n)
        for _ in range(reps)
    ]


def rate(shift: float, seed: int, verdict: str = "regressed", **kw) -> float:
    rng = np.random.default_rng(seed)
    hits = [
        compare_metric("latency", side(rng, **kw), side(rng, shift, **kw)).verdict == verdict
        for _ in range(PAIRS)
    ]
    return sum(hits) / PAIRS


def test_false_alarms_at_most_5_percent_on_pure_noise():
    assert rate(0.0, seed=1) <= 0.05


def test_false_alarms_at_most_5_percent_when_runs_drift_apart():
    # Identical code, each run 8% off at random (the 10-20% moves seen here between runs):
    # 3 repetitions a side are completely separated by chance in 1 pair in 10, and the
    # pooled iterations call it p ~ 0. Only a change beyond the spread is a verdict.
    assert rate(0.0, seed=8, run_drift=0.08) <= 0.05
    assert rate(0.0, seed=9, run_drift=0.08, verdict="improved") <= 0.05


def test_detects_a_shift_beyond_the_between_run_spread_at_least_95_percent():
    assert rate(2 * BETWEEN_RUN_SPREAD, seed=2) >= 0.95


def test_a_10_percent_shift_between_stored_runs_is_noisy_not_a_verdict():
    # Within the drift two stored runs show: only an interleaved A/B can call it.
    assert rate(0.10, seed=2, verdict="noisy") >= 0.95


def test_single_repetition_falls_back_to_samples_and_stays_quiet():
    assert rate(0.0, seed=3, reps=1, n=200) <= 0.05


def test_improvement_and_throughput_direction():
    rng = np.random.default_rng(4)
    faster = compare_metric("latency", side(rng), side(rng, -0.6))
    assert faster.verdict == "improved"
    # Throughput: higher is better, so a drop is the regression.
    lower = compare_metric(
        "throughput", [[100.0], [101.0], [99.0]], [[40.0], [41.0], [39.0]], higher_is_better=True
    )
    assert lower.verdict == "regressed" and lower.worse_change > 0


def test_large_but_overlapping_change_is_noisy_not_regressed():
    res = compare_metric("peak_memory", [[100.0], [150.0], [90.0]], [[120.0], [95.0], [140.0]])
    assert res.verdict in ("noisy", "unchanged")
    assert compare_metric("x", [[1.0]], [[2.0]]).verdict == "too few repetitions"


def test_two_repetitions_a_side_give_no_verdict_however_small_the_pooled_p():
    # The case: the same code twice, 2 processes a side, each process a little
    # off (DRIFT 3%), 2,000 tight iterations each: pooled iterations say p ~ 0, yet the
    # shift is between processes, not between code versions.
    rng = np.random.default_rng(6)
    base = [f * rng.lognormal(0, 0.02, 2000) for f in (1.00, 0.99)]
    cand = [f * rng.lognormal(0, 0.02, 2000) for f in (1.06, 1.07)]
    res = compare_metric("latency", base, cand, threshold=0.05)
    assert res.p_samples is not None and res.p_samples < 1e-50
    assert res.verdict == "too few repetitions" and not res.significant
    assert res.decided_by == "too few repetitions (2 vs 2)"
    # One repetition a side, or 3 against 2: the same.
    one = compare_metric("latency", base[:1], cand[:1], threshold=0.05)
    assert one.verdict == "too few repetitions"
    three = [*base, 1.005 * rng.lognormal(0, 0.02, 2000)]
    assert compare_metric("latency", three, cand, threshold=0.05).verdict == "too few repetitions"
    # Within the threshold the point estimate alone decides: no test involved.
    assert compare_metric("latency", base, cand, threshold=0.10).verdict == "unchanged"


def test_three_repetitions_a_side_detect_a_real_shift():
    assert MIN_REPETITIONS == 3
    rng = np.random.default_rng(7)
    res = compare_metric("latency", side(rng), side(rng, 0.8))
    assert res.decided_by == "separation" and res.verdict == "regressed"
    # A shift between processes alone overlaps at 3 a side: noisy, not regressed.
    base = [f * rng.lognormal(0, 0.02, 500) for f in (1.00, 1.09, 0.98)]
    cand = [f * rng.lognormal(0, 0.02, 500) for f in (1.10, 1.01, 1.12)]
    assert compare_metric("latency", base, cand).verdict == "noisy"


def test_repetition_test_takes_over_with_enough_repetitions():
    assert min_attainable_p(3, 3) > 0.05 >= min_attainable_p(4, 4)
    rng = np.random.default_rng(5)
    res = compare_metric("latency", side(rng, reps=5), side(rng, 0.8, reps=5))
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
