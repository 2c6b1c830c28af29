"""The rate sweep on a stub engine: its order, its rates, its budget."""

from __future__ import annotations

import asyncio
import math

import pytest

from stackcost.result import RateFigures
from stackcost.serving.engine import Request
from stackcost.serving.engines.stub import StubEngine
from stackcost.serving.sweep import Bounds, between, run_sweep


def make(first: int, count: int) -> list[Request]:
    return [Request(first + i, (1, 2), 2) for i in range(count)]


def sweep(
    engine: StubEngine, rates: int, per_rate_s: float, budget_s: float
) -> tuple[list[RateFigures], list[str], int]:
    seen: list[str] = []
    restarts = 0

    async def restart() -> None:
        nonlocal restarts
        restarts += 1

    async def go() -> list[RateFigures]:
        await engine.start()
        try:
            return await run_sweep(
                engine, make, rates, per_rate_s, budget_s, "poisson", Bounds(ttft_ms=1000.0), 0,
                lambda fig: seen.append(fig.label), restart,
            )  # fmt: skip
        finally:
            await engine.stop()

    return asyncio.run(go()), seen, restarts


def test_between_spaces_rates_strictly_inside() -> None:
    assert between(1.0, 5.0, 3) == pytest.approx([2.0, 3.0, 4.0])
    assert between(5.0, 5.0, 3) == []


def test_the_sweep_runs_unloaded_then_saturated_then_the_rates_between() -> None:
    engine = StubEngine(slots=4, prefill_s=0.01, tpot_s=0.01)
    figs, seen, restarts = sweep(engine, rates=2, per_rate_s=0.4, budget_s=30)
    assert [f.label for f in figs] == seen  # each handed on as it finished
    assert [f.process for f in figs] == ["sequential", "burst", "poisson", "poisson"]
    single, burst, *middle = figs
    assert single.in_flight_peak == 1 and burst.target_rps == math.inf
    # Four slots hold more than one request at a time (the service is sleep, not CPU).
    assert burst.request_rps > single.request_rps
    assert single.request_rps < middle[0].target_rps < middle[1].target_rps < burst.request_rps
    assert all(f.completed > 0 and f.goodput_rps is not None for f in figs)
    assert restarts == 0


def test_an_engine_that_does_not_batch_is_swept_up_to_its_capacity() -> None:
    engine = StubEngine(slots=1, prefill_s=0.01, tpot_s=0.01)
    figs, _, _ = sweep(engine, rates=2, per_rate_s=0.4, budget_s=30)
    _, burst, *middle = figs
    assert len(middle) == 2
    assert 0 < middle[0].target_rps < middle[1].target_rps < burst.request_rps


def test_a_spent_budget_skips_the_remaining_rates_with_the_reason() -> None:
    engine = StubEngine(slots=2, prefill_s=0.02, tpot_s=0.02)
    figs, _, _ = sweep(engine, rates=3, per_rate_s=0.5, budget_s=0.8)
    skipped = [f for f in figs if f.sent == 0]
    assert skipped and all(f.ended_by == "sweep budget of 0.8 s spent" for f in skipped)
    assert len(figs) >= 2  # what ran before the budget was spent is kept


class DiesOnce(StubEngine):
    """Dies at the first request of the first rate between the ends, then serves again."""

    def __init__(self) -> None:
        super().__init__(slots=2, prefill_s=0.005, tpot_s=0.005)
        self.died = False
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        await super().start()

    async def stream(self, request: Request):  # noqa: ANN201
        from stackcost.serving.engine import EngineDied

        if request.index >= self.first_middle and not self.died:
            self.died = True
            raise EngineDied("killed mid-sweep")
        async for n in super().stream(request):
            yield n


def test_an_engine_that_dies_mid_sweep_fails_that_rate_and_is_restarted() -> None:
    engine = DiesOnce()
    engine.first_middle = 10**9
    restarts = []

    async def go() -> list[RateFigures]:
        await engine.start()

        async def restart() -> None:
            restarts.append(1)
            await engine.stop()
            await engine.start()

        def on_rate(fig: RateFigures) -> None:
            if fig.process == "burst":  # the next request made is the first rate's first
                engine.first_middle = -1

        try:
            return await run_sweep(
                engine, make, 2, 0.3, 30, "poisson", Bounds(), 0, on_rate, restart
            )
        finally:
            await engine.stop()

    figs = asyncio.run(go())
    first, second = figs[2], figs[3]
    assert first.ended_by == "engine died: killed mid-sweep" and first.completed == 0
    assert restarts == [1] and engine.starts == 2
    assert second.ended_by is None and second.completed == second.sent > 0
