"""The Breakdown model's arithmetic and the interval helpers, on hand-built numbers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stackcost.profile.breakdown import (
    Breakdown,
    OpRow,
    intersect,
    length,
    merge,
    subtract,
    top_ops,
)


def test_remainder_is_derived_and_checked():
    b = Breakdown(method="hand", iters=4, wall_ms=10.0, parts_ms={"kernels": 6.0, "overhead": 3.7})
    assert b.remainder_ms == pytest.approx(0.3)
    assert b.covered() == pytest.approx(0.97)
    assert b.check()  # 3% off
    assert not b.check(tolerance=0.02)


def test_a_large_remainder_fails_the_check():
    b = Breakdown(method="hand", iters=1, wall_ms=10.0, parts_ms={"kernels": 5.0, "overhead": 4.0})
    assert b.remainder_ms == pytest.approx(1.0)
    assert not b.check()
    # A negative remainder (the parts claim more than the wall) fails just the same.
    over = Breakdown(method="hand", iters=1, wall_ms=10.0, parts_ms={"kernels": 11.0})
    assert over.remainder_ms == pytest.approx(-1.0)
    assert not over.check()


def test_an_inconsistent_remainder_is_rejected():
    with pytest.raises(ValidationError, match="remainder_ms"):
        Breakdown(method="hand", iters=1, wall_ms=10.0, parts_ms={"kernels": 5.0}, remainder_ms=1.0)


def test_round_trips_through_json():
    b = Breakdown(
        method="hand",
        iters=2,
        wall_ms=2.0,
        parts_ms={"kernels": 1.5, "overhead": 0.4},
        top_ops=[OpRow(name="aten::mm", calls=2, self_ms=3.0, share=0.75)],
        notes=["n"],
        unprofiled_wall_ms=1.8,
    )
    assert Breakdown.model_validate_json(b.model_dump_json()) == b
    assert "remainder" in b.summary() and "aten::mm" in b.summary()


def test_zero_wall_does_not_divide_by_zero():
    b = Breakdown(method="hand", iters=1, wall_ms=0.0, parts_ms={})
    assert b.covered() == 0.0
    assert b.check()


def test_interval_union_counts_overlaps_once():
    assert merge([(5, 6), (0, 2), (1, 3), (3, 4), (7, 7)]) == [(0, 4), (5, 6)]
    assert length([(0, 2), (1, 3), (10, 11)]) == 4


def test_intersect_and_subtract():
    assert intersect([(0, 10)], [(2, 3), (5, 12)]) == [(2, 3), (5, 10)]
    assert intersect([(0, 1)], [(2, 3)]) == []
    # An op's self intervals: its span minus its children's.
    assert subtract((0, 10), [(2, 3), (2.5, 4), (9, 12)]) == [(0, 2), (4, 9)]
    assert subtract((0, 10), []) == [(0, 10)]
    assert subtract((0, 10), [(0, 10)]) == []


def test_top_ops_groups_ranks_and_shares_of_wall():
    rows = [("a", 1.0), ("b", 3.0), ("a", 1.5), ("c", 0.5)]
    top = top_ops(rows, total_ms=10.0, n=2)
    assert [(r.name, r.calls, r.self_ms) for r in top] == [("b", 1, 3.0), ("a", 2, 2.5)]
    assert top[1].share == pytest.approx(0.25)
