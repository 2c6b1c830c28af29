"""The interleaved A/B decision rule on synthetic block ratios: its false-alarm rate and
its power, seeded, so the rule itself is checked apart from any machine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stackcost.measure.paired import (
    block_log_ratio,
    decide,
    look_points,
    ratio_interval,
    sequential,
)

TRIALS = 400


def _rate(effect: float, sigma: float, verdict: str, seed: int, **rule) -> float:
    """How often `sequential` reaches `verdict` on blocks with a true ratio 1 + effect
    and a per-block log-ratio spread sigma (12 blocks at most)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(TRIALS):
        blocks = rng.normal(math.log1p(effect), sigma, rule.get("max_blocks", 12))
        hits += sequential(list(blocks), **rule).verdict == verdict
    return hits / TRIALS


@pytest.mark.parametrize("sigma", [0.01, 0.03, 0.05])
def test_aa_false_alarms_stay_within_the_error_budget(sigma: float) -> None:
    # alpha / 2 = 2.5% is the budget for a false `regressed`; allow sampling noise.
    assert _rate(0.0, sigma, "regressed", seed=1) <= 0.04
    assert _rate(0.0, sigma, "improved", seed=2) <= 0.04


def test_a_drift_shared_by_both_sides_is_no_change() -> None:
    # Drift moves both sides of a block alike: the block ratio carries none of it.
    rng = np.random.default_rng(3)
    for _ in range(50):
        ratios = []
        for level in rng.uniform(0.8, 1.3, 12):  # the machine's speed in each block
            a = [level * rng.lognormal(0, 0.01) for _ in range(2)]
            b = [level * rng.lognormal(0, 0.01) for _ in range(2)]
            ratios.append(block_log_ratio(a, b))
        assert sequential(ratios).verdict == "unchanged"


def test_power_against_injected_slowdowns() -> None:
    assert _rate(0.10, 0.03, "regressed", seed=4) >= 0.99
    assert _rate(0.05, 0.02, "regressed", seed=5) >= 0.95
    assert _rate(0.05, 0.03, "regressed", seed=6) >= 0.90


def test_a_change_within_the_threshold_is_not_a_regression() -> None:
    assert _rate(0.01, 0.005, "regressed", seed=7) == 0.0
    assert _rate(0.01, 0.005, "unchanged", seed=7) == 1.0


def test_a_throughput_that_drops_is_a_regression() -> None:
    blocks = [math.log(0.9)] * 3 + [math.log(0.91)]
    r = decide(blocks, min_blocks=4, max_blocks=8, higher_is_better=True)
    assert (r.verdict, r.final) == ("regressed", True)
    assert r.worse_change == pytest.approx(1 / r.ratio - 1)


def test_between_looks_there_is_no_verdict() -> None:
    assert look_points(4, 12) == (4, 8, 12)
    r = decide([0.2] * 5, min_blocks=4, max_blocks=12)  # 5 is not a look
    assert (r.verdict, r.final) == ("undecided", False)


def test_the_last_look_says_noisy_when_nothing_is_clear() -> None:
    blocks = [0.1, -0.1, 0.12, -0.09]
    assert decide(blocks, min_blocks=2, max_blocks=4).verdict == "noisy"


def test_ratio_interval_is_the_t_interval_of_the_log_ratios() -> None:
    from scipy import stats

    x = [0.01, 0.03, -0.02, 0.04, 0.0]
    ratio, low, high = ratio_interval(x, 0.95)
    ci = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert (math.log(low), math.log(ratio), math.log(high)) == pytest.approx(
        (ci[0], np.mean(x), ci[1])
    )


def test_block_log_ratio_refuses_empty_or_nonpositive_sides() -> None:
    with pytest.raises(ValueError):
        block_log_ratio([], [1.0])
    with pytest.raises(ValueError):
        block_log_ratio([0.0], [1.0])
