"""The held-out rules judged on their intervals, from synthetic counts (no model, no data).

A finite split decides only what its samples can: 5 flips in 360 (98.6% agreement) do not
show a rung below a 99% rule, 30 do. A row that meets its rule as observed is ok, its
reason naming an interval that still reaches past the bound (1 flip in 360).
"""

from __future__ import annotations

import numpy as np
import pytest

from stackcost.scenarios.heldout import (
    CONFIDENCE,
    _Answer,
    agreement_interval,
    drop_interval,
    judge,
    verdict,
)

MIN_TOP1, MAX_DROP = 0.99, 1.0


def agreement_verdict(flips: int, n: int) -> tuple[str, str]:
    agree = n - flips
    return verdict(n, agree / n, agreement_interval(agree, n), MIN_TOP1, None, None, MAX_DROP)


def test_five_flips_in_360_are_undecided_not_wrong():
    low, high = agreement_interval(355, 360)
    assert low < MIN_TOP1 < high  # 98.6% observed, but 99% is inside the interval
    status, reason = agreement_verdict(5, 360)
    assert status == "undecided", reason
    assert "undecided at n=360" in reason and "98.6%" in reason and "straddles 99%" in reason


def test_thirty_flips_in_360_are_wrong():
    status, reason = agreement_verdict(30, 360)
    assert status == "wrong", reason
    assert "top-1 agreement 91.7%" in reason and "< 99%" in reason


def test_a_row_meeting_its_rule_is_ok_and_says_what_the_split_cannot_exclude():
    assert agreement_verdict(0, 360) == ("ok", "")  # 0.05 ** (1 / 360) = 99.17% >= 99%
    status, reason = agreement_verdict(0, 256)  # 0.05 ** (1 / 256) = 98.84%
    assert status == "ok" and "at n=256" in reason and "reaches below 99%" in reason
    status, reason = agreement_verdict(1, 360)  # 99.7% [98.7%, 100%]
    assert status == "ok" and "reaches below 99%" in reason
    assert agreement_verdict(10, 10_000) == ("ok", "")  # MNIST's test split decides


def test_agreement_interval_is_clopper_pearson():
    # With no flip the exact lower bound has a closed form: P(all n agree | p) = alpha.
    alpha = (1 - CONFIDENCE) / 2
    low, high = agreement_interval(360, 360)
    assert high == 1.0 and low == pytest.approx(alpha ** (1 / 360))
    low, high = agreement_interval(0, 360)
    assert low == 0.0 and high == pytest.approx(1 - alpha ** (1 / 360))


def test_drop_interval_counts_how_many_samples_may_change():
    # No flip in 360 is not a drop of exactly 0: up to ~0.75 pt is not excluded.
    low, high = drop_interval(0, 0, 360)
    assert low == pytest.approx(-high) and 0.5 < high < MAX_DROP
    # One sample lost: the bound reaches past the observed 0.28 pt, and past 1 pt.
    low, high = drop_interval(1, 0, 360)
    assert low < 0 < 1 / 3.6 < MAX_DROP < high
    low, high = drop_interval(4, 1, 360)  # 0.8 pt observed
    assert low < 0 < 0.8 < MAX_DROP < high
    low, high = drop_interval(20, 0, 400)  # 5 pt lost, none gained
    assert MAX_DROP < low < 5.0 < high
    # Mirror images, and the edges: everything lost is a drop of 100 pt at most.
    assert drop_interval(0, 5, 360) == pytest.approx(
        tuple(-x for x in drop_interval(5, 0, 360))[::-1]
    )
    assert drop_interval(360, 0, 360)[1] == 100.0 and drop_interval(0, 360, 360)[0] == -100.0


def test_drop_interval_covers_the_true_drop_as_often_as_it_claims():
    """Simulated splits of 360 with a true drop of 1 pt: each one-sided bound misses the
    truth about 5% of the time, as CONFIDENCE says. With nothing gained, an interval
    conditional on the observed flips (the one this replaced) put its upper bound below
    the true drop in 51% of the splits."""
    rng = np.random.default_rng(0)
    for lost, gained, sides in ((0.02, 0.01, (0, 1)), (0.01, 0.0, (1,))):
        draws = rng.multinomial(360, [lost, gained, 1 - lost - gained], size=2000)
        bounds = np.array([drop_interval(int(a), int(b), 360) for a, b, _ in draws])
        missed = {0: np.mean(bounds[:, 0] > 1.0 + 1e-9), 1: np.mean(bounds[:, 1] < 1.0 - 1e-9)}
        assert all(missed[side] < 0.075 for side in sides), (lost, gained, missed)


def test_the_drop_is_judged_on_its_interval():
    def drop_verdict(lost: int, gained: int, n: int) -> str:
        drop = (lost - gained) / n * 100
        return verdict(n, None, None, MIN_TOP1, drop, drop_interval(lost, gained, n), MAX_DROP)[0]

    assert drop_verdict(5, 0, 360) == "undecided"  # 1.4 pt observed, 1 pt inside
    assert drop_verdict(20, 0, 400) == "wrong"
    assert drop_verdict(0, 0, 360) == "ok"
    assert drop_verdict(2, 2, 360) == "ok"  # as many gained as lost: 0 pt, [-1.2, 1.2]
    assert drop_verdict(3, 3, 360) == "ok"  # 0 pt too, [-1.3, 1.3] named in the reason


def test_judge_states_each_rules_interval():
    labels = np.arange(360) % 10
    flipped = labels.copy()
    flipped[:5] = (flipped[:5] + 1) % 10  # 5 flips, each a right answer lost
    answers = [
        _Answer("eager", "fp32", labels.copy()),
        _Answer("onnxruntime", "fp32", labels.copy()),
        _Answer("onnxruntime", "int8", flipped),
    ]
    got = {(h.backend, h.precision): h for h in judge(answers, labels)}
    reference = got["eager", "fp32"]  # itself: exact, no split's uncertainty to state
    assert (reference.top1_low, reference.drop_low_pt, reference.drop_high_pt) == (1.0, 0.0, 0.0)
    assert got["onnxruntime", "fp32"].status == "ok"
    int8 = got["onnxruntime", "int8"]
    assert int8.status == "undecided", int8
    assert int8.top1_low < MIN_TOP1 < int8.top1_high and int8.top1 == pytest.approx(355 / 360)
    assert int8.drop_low_pt < MAX_DROP < int8.drop_high_pt
    record = int8.record()
    assert {"top1_low", "top1_high", "drop_low_pt", "drop_high_pt"} <= record.keys()
