"""The cell's statistics across repetitions: the interval over repetition medians and the
rule that calls repetitions disagreeing beyond the target."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from stackcost.measure.stats import (
    normal_range_quantile,
    relative_range,
    repetition_interval,
    spread_limit,
    spread_reason,
)

# Six repetitions (each its own process) of one cell, measured here: every one settled.
MEASURED = [0.522, 0.686, 0.531, 0.529, 0.543, 0.528]
TARGET = 0.02  # Protocol.target_ci's default


def test_interval_is_the_t_interval_of_the_repetition_medians():
    got = repetition_interval(MEASURED)
    assert got is not None and got.n == 6
    low, high = sps.t.interval(0.95, 5, loc=np.mean(MEASURED), scale=sps.sem(MEASURED))
    assert (got.low_ms, got.high_ms) == (pytest.approx(low), pytest.approx(high))
    assert got.mean_ms == pytest.approx(np.mean(MEASURED))
    assert got.method == "t-interval over 6 repetition medians"
    # The pooled iterations said ±0.1%; the repetitions say ±12%.
    assert got.half_width_rel == pytest.approx(0.1203, abs=1e-3)


@pytest.mark.parametrize("medians", [[], [0.5], [0.5, math.nan]])
def test_fewer_than_two_repetitions_have_no_interval(medians):
    assert repetition_interval(medians) is None
    assert spread_reason(medians, TARGET) == ""


def test_interval_covers_the_mean_at_its_confidence():
    rng = np.random.default_rng(3)
    for n in (2, 3, 6):
        intervals = [repetition_interval(rng.normal(1.0, 0.05, n)) for _ in range(2000)]
        covered = np.mean([i.low_ms <= 1.0 <= i.high_ms for i in intervals])
        assert 0.93 <= covered <= 0.97, (n, covered)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 10, 20])
def test_normal_range_quantile_is_the_studentized_range_at_infinite_df(n):
    expected = sps.studentized_range.ppf(0.95, n, np.inf)
    assert normal_range_quantile(n) == pytest.approx(expected, rel=1e-4)


def test_spread_limit_in_units_of_the_target():
    assert [round(spread_limit(n, 1.0), 2) for n in (2, 3, 4, 6, 10)] == [
        1.41,
        1.69,
        1.85,
        2.06,
        2.28,
    ]
    assert spread_limit(3, 0.01) == pytest.approx(spread_limit(3, 0.02) / 2)


@pytest.mark.parametrize("n", [2, 3, 6])
def test_repetitions_at_the_target_disagree_five_percent_of_the_time(n):
    """The rule's false-alarm rate, when repetitions differ only by noise at the target."""
    rng = np.random.default_rng(n)
    sd = TARGET / 1.959964  # a median whose 95% CI half-width is exactly the target
    alarms = np.mean([spread_reason(rng.normal(1.0, sd, n), TARGET) != "" for _ in range(4000)])
    assert 0.035 <= alarms <= 0.065, alarms


def test_the_measured_six_repetitions_disagree_and_the_reason_says_by_how_much():
    assert relative_range(MEASURED) == pytest.approx((0.686 - 0.522) / 0.530)
    reason = spread_reason(MEASURED, TARGET)
    assert reason.startswith("repetition medians disagree: 6 span 0.522–0.686 ms, 30.9%")
    assert "limit 4.1% for target ±2.0%" in reason


@pytest.mark.parametrize("n", [2, 3, 6])
def test_repetitions_within_one_percent_agree(n):
    medians = list(np.linspace(0.500, 0.505, n))  # a 1% range
    assert spread_reason(medians, TARGET) == ""
    assert spread_reason(medians, 0.003) != ""  # ... but not to a ±0.3% target


def test_a_tighter_target_asks_closer_repetitions():
    medians = [0.500, 0.512, 0.506]  # a 2.4% range
    assert spread_reason(medians, 0.02) == ""
    assert spread_reason(medians, 0.01) != ""


def test_a_latency_interval_stops_at_zero():
    got = repetition_interval([0.066, 0.118])  # two processes far apart: t = 12.7 at n = 2
    assert got.low_ms == 0.0 and got.high_ms == pytest.approx(0.092 + 12.706 * 0.026, rel=1e-3)
    assert got.half_width_rel == pytest.approx(12.706 * 0.026 / 0.092, rel=1e-3)
