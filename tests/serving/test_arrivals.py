"""Arrival schedules: open loop, seeded, at the rate asked."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stackcost.serving.arrivals import schedule


def test_poisson_gaps_are_exponential_at_the_rate_and_seeded() -> None:
    offsets = schedule(50.0, 4000, "poisson", seed=1)
    gaps = np.diff(offsets)
    assert offsets[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.05)
    assert gaps.std() == pytest.approx(1 / 50, rel=0.08)  # exponential: sd = mean
    assert np.array_equal(offsets, schedule(50.0, 4000, "poisson", seed=1))
    assert not np.array_equal(offsets, schedule(50.0, 4000, "poisson", seed=2))


def test_constant_and_all_at_once() -> None:
    assert list(schedule(4.0, 3, "constant", seed=0)) == [0.0, 0.25, 0.5]
    assert list(schedule(math.inf, 3, "poisson", seed=0)) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan])
def test_a_rate_that_is_not_positive_is_refused_by_value(rate: float) -> None:
    with pytest.raises(ValueError, match=f"request rate {rate!r}"):
        schedule(rate, 3, "poisson", seed=0)
