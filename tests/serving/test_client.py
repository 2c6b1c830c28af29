"""The load generator against a stub engine of known service time. Only what physics
guarantees is asserted (a token cannot come before its engine made it; a queued request
waits for the one ahead), never a duration's upper bound on a busy machine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from stackcost.serving.client import RequestRecord, drive, one_at_a_time
from stackcost.serving.engine import Engine, EngineDied, Request
from stackcost.serving.engines.stub import StubEngine


def requests(count: int, tokens: int = 3) -> list[Request]:
    return [Request(i, (1, 2, 3), tokens) for i in range(count)]


async def with_engine(engine: Engine, coro_of):  # noqa: ANN001, ANN202
    await engine.start()
    try:
        return await coro_of(engine)
    finally:
        await engine.stop()


def test_every_token_is_stamped_after_the_engine_emitted_it() -> None:
    stub = StubEngine(slots=1, prefill_s=0.02, tpot_s=0.005)
    result = asyncio.run(with_engine(stub, lambda e: drive(e, requests(3), [0.0, 0.1, 0.2])))
    for rec in result.records:
        assert rec.complete and rec.tokens == 3 and len(rec.arrivals) == 3
        assert rec.ttft_ns >= 0.02e9
        assert rec.e2e_ns >= stub.service_s(3) * 1e9
        for (client_ns, _), engine_ns in zip(rec.arrivals, stub.emitted_ns[rec.index], strict=True):
            assert client_ns >= engine_ns
        assert rec.lateness_ns >= 0


def test_a_request_sent_behind_another_waits_for_its_slot() -> None:
    one = StubEngine(slots=1, prefill_s=0.05, tpot_s=0.01)
    result = asyncio.run(with_engine(one, lambda e: drive(e, requests(2), [0.0, 0.0])))
    second = max(result.records, key=lambda r: r.ttft_ns)
    assert second.ttft_ns >= (one.service_s(3) + 0.05) * 1e9
    assert result.in_flight_peak == 2


def test_two_slots_serve_two_requests_at_once() -> None:
    two = StubEngine(slots=2, prefill_s=0.05, tpot_s=0.1)
    result = asyncio.run(with_engine(two, lambda e: drive(e, requests(2), [0.0, 0.0])))
    began = sorted(two.began_ns.values())
    # The second began before the first's service (0.25 s) was over: it did not queue.
    assert began[1] - began[0] < two.service_s(3) * 1e9
    assert max(s[2] or 0 for s in result.occupancy) == 2


class Flaky(StubEngine):
    """Fails request 1, stops request 2 one token short."""

    async def stream(self, request: Request) -> AsyncIterator[int]:
        if request.index == 1:
            raise RuntimeError("slot lost")
        sent = 0
        async for n in super().stream(request):
            sent += n
            if request.index == 2 and sent == request.new_tokens - 1:
                yield n
                return
            yield n


def test_a_failed_or_short_request_is_a_record_and_the_rate_goes_on() -> None:
    flaky = Flaky(slots=1, prefill_s=0.001, tpot_s=0.001)
    result = asyncio.run(with_engine(flaky, lambda e: drive(e, requests(4), [0.0] * 4)))
    errors = {r.index: r.error for r in result.records}
    assert errors[1] == "RuntimeError: slot lost"
    assert errors[2] == "engine returned 2 of 3 tokens"
    assert errors[0] is None and errors[3] is None
    assert result.ended_by is None


class Dies(StubEngine):
    async def stream(self, request: Request) -> AsyncIterator[int]:
        if request.index == 2:
            raise EngineDied("port 8080 closed")
        async for n in super().stream(request):
            yield n


def test_an_engine_that_dies_ends_the_rate_with_its_reason() -> None:
    dies = Dies(slots=1, prefill_s=0.05, tpot_s=0.01)
    result = asyncio.run(with_engine(dies, lambda e: drive(e, requests(4), [0.0, 0.0, 0.01, 5.0])))
    assert result.ended_by == "engine died: port 8080 closed"
    by_index = {r.index: r for r in result.records}
    assert by_index[3].error == "not sent: engine died: port 8080 closed"
    assert all(not r.complete for r in result.records[1:])


def test_a_rate_is_cut_at_its_time_limit_and_says_so() -> None:
    slow = StubEngine(slots=1, prefill_s=0.3, tpot_s=0.01)
    result = asyncio.run(
        with_engine(slow, lambda e: drive(e, requests(3), [0.0, 0.0, 0.0], limit_s=0.1))
    )
    assert result.ended_by == "time limit of 0.1 s reached"
    assert all(r.error == "time limit of 0.1 s reached" for r in result.records)


def test_one_at_a_time_never_has_two_in_flight_and_stops_at_its_limit() -> None:
    stub = StubEngine(slots=4, prefill_s=0.01, tpot_s=0.005)
    result = asyncio.run(with_engine(stub, lambda e: one_at_a_time(e, requests(1000), limit_s=0.3)))
    assert result.in_flight_peak == 1
    assert 3 <= len(result.records) < 1000 and all(r.complete for r in result.records)
    spans = sorted((r.sent_ns, r.arrivals[-1][0]) for r in result.records)
    assert all(
        a_end <= b_sent for (_, a_end), (b_sent, _) in zip(spans[:-1], spans[1:], strict=True)
    )


def test_derived_latencies_follow_their_definitions() -> None:
    rec = RequestRecord(
        0, 3, 4, scheduled_ns=0, sent_ns=10, arrivals=[(110, 1), (130, 2), (170, 1)]
    )
    assert rec.complete and rec.ttft_ns == 100 and rec.e2e_ns == 160
    assert rec.tpot_ns == pytest.approx(60 / 3)
    assert rec.itl_ns == [20, 40] and rec.lateness_ns == 10
