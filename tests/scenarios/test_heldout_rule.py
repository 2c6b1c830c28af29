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


def test_drop_interval_from_the_discordant_pairs():
    assert drop_interval(0, 0, 360) == (0.0, 0.0)  # both right or both wrong on every sample
    low, high = drop_interval(4, 1, 360)  # 0.8 pt observed
    assert low < 0 < 0.8 < MAX_DROP < high
    low, high = drop_interval(20, 0, 400)  # 5 pt lost, none gained
    assert MAX_DROP < low < 5.0 == pytest.approx(high)


def test_the_drop_is_judged_on_its_interval():
    def drop_verdict(lost: int, gained: int, n: int) -> str:
        drop = (lost - gained) / n * 100
        return verdict(n, None, None, MIN_TOP1, drop, drop_interval(lost, gained, n), MAX_DROP)[0]

    assert drop_verdict(5, 0, 360) == "undecided"  # 1.4 pt observed, 1 pt inside
    assert drop_verdict(20, 0, 400) == "wrong"
    assert drop_verdict(0, 0, 360) == "ok"
    assert drop_verdict(2, 2, 360) == "ok"  # as many gained as lost: 0 pt, [-0.9, 0.9]
    assert drop_verdict(3, 3, 360) == "ok"  # 0 pt too, [-1.2, 1.2] named in the reason


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
    assert got["onnxruntime", "fp32"].status == "ok"
    int8 = got["onnxruntime", "int8"]
    assert int8.status == "undecided", int8
    assert int8.top1_low < MIN_TOP1 < int8.top1_high and int8.top1 == pytest.approx(355 / 360)
    assert int8.drop_low_pt < MAX_DROP < int8.drop_high_pt
    record = int8.record()
    assert {"top1_low", "top1_high", "drop_low_pt", "drop_high_pt"} <= record.keys()
