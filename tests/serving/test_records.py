"""A rate's figures from hand-made records: the definitions, not the clock."""

from __future__ import annotations

import pytest

from stackcost.serving.client import Drive, RequestRecord
from stackcost.serving.records import figures

MS = 1_000_000


def rec(
    index: int, sent_ms: float, ttft_ms: float, gap_ms: float, tokens: int = 3
) -> RequestRecord:
    sent = int(sent_ms * MS)
    arrivals = [(sent + int((ttft_ms + i * gap_ms) * MS), 1) for i in range(tokens)]
    return RequestRecord(index, 8, tokens, scheduled_ns=sent, sent_ns=sent, arrivals=arrivals)


def test_goodput_counts_the_requests_within_both_bounds() -> None:
    records = [rec(0, 0, 100, 10), rec(1, 0, 300, 10), rec(2, 0, 100, 50), rec(3, 0, 100, 20)]
    failed = RequestRecord(4, 8, 3, scheduled_ns=0, sent_ns=0, error="RuntimeError: x")
    drv = Drive(records + [failed], start_ns=0, end_ns=1000 * MS, occupancy=[], in_flight_peak=5)
    fig = figures(
        drv, "2 req/s", 2.0, "poisson", ttft_bound_ms=200, tpot_bound_ms=25, unloaded_ttft_ms=100
    )
    assert fig.sent == 5 and fig.completed == 4 and fig.failed == 1
    assert fig.duration_s == pytest.approx(1.0)
    assert fig.request_rps == pytest.approx(4.0)
    assert fig.output_tokens_per_s == pytest.approx(12.0)
    assert fig.goodput_rps == pytest.approx(2.0)  # requests 0 and 3: 1 breaks TTFT, 2 TPOT
    assert fig.ttft_ms.p50 == pytest.approx(100) and fig.ttft_ms.count == 4
    assert fig.queueing_ms.mean == pytest.approx(200 / 4)  # only request 1 waited: 200 ms
    assert fig.tpot_ms.mean == pytest.approx((10 + 10 + 50 + 20) / 4)
    assert fig.itl_ms.count == 8
    assert fig.errors == ["RuntimeError: x"]


def test_without_bounds_there_is_no_goodput() -> None:
    drv = Drive([rec(0, 0, 5, 1)], start_ns=0, end_ns=7 * MS, occupancy=[], in_flight_peak=1)
    fig = figures(drv, "one at a time", None, "sequential", None, None, None)
    assert fig.goodput_rps is None and fig.queueing_ms.count == 0


def test_a_percentile_needs_ten_requests_beyond_it_and_views_mark_one_that_has_fewer() -> None:
    from stackcost.report.frames.serve import few_note, pct
    from stackcost.result import Spread
    from stackcost.serving.records import enough, needed

    assert (needed(50), needed(90), needed(99)) == (20, 100, 1000)
    few = Spread.of([float(i) * 1e6 for i in range(1, 45)])  # 44 requests, as a short rate
    many = Spread.of([float(i % 100) * 1e6 for i in range(1000)])
    assert enough(few, 50) and not enough(few, 90) and not enough(few, 99)
    assert enough(many, 99)
    assert pct(few, 50) == "22.50 ms" and pct(few, 99).endswith("†")
    assert not pct(many, 99).endswith("†")
    rows = [{"cols": ["eager", "1 req/s", pct(few, 99), "a note with † in it"]}]
    assert few_note(rows) and "p99 1000" in few_note(rows)[0]
    rows[0]["cols"][2] = pct(many, 99)
    assert few_note(rows) == []  # the notes column is not a figure
