"""The rate sweep on a stub engine: its order, its rates, its budget."""

from __future__ import annotations

import asyncio
import math

import pytest

from stackcost.result import RateFigures
from stackcost.serving.engine import Request
from stackcost.serving.engines.stub import StubEngine
from stackcost.serving.sweep import Bounds, SweepStopped, between, run_sweep


def make(first: int, count: int) -> list[Request]:
    return [Request(first + i, (1, 2), 2) for i in range(count)]


def sweep(
    engine: StubEngine,
    rates: int,
    per_rate_s: float,
    budget_s: float,
    kept: list[RateFigures] | None = None,
) -> tuple[list[RateFigures], list[str]]:
    """The sweep's rates, and the labels handed on as each finished."""
    seen: list[str] = []

    async def go() -> list[RateFigures]:
        await engine.start()
        try:
            return await run_sweep(
                engine, make, rates, per_rate_s, budget_s, "poisson", Bounds(ttft_ms=1000.0), 0,
                lambda fig: seen.append(fig.label), kept or [],
            )  # fmt: skip
        finally:
            await engine.stop()

    return asyncio.run(go()), seen


def test_between_spaces_rates_strictly_inside() -> None:
    assert between(1.0, 5.0, 3) == pytest.approx([2.0, 3.0, 4.0])
    assert between(5.0, 5.0, 3) == []


def test_the_sweep_runs_unloaded_then_saturated_then_the_rates_between() -> None:
    engine = StubEngine(slots=4, prefill_s=0.01, tpot_s=0.01)
    figs, seen = sweep(engine, rates=2, per_rate_s=0.4, budget_s=30)
    assert [f.label for f in figs] == seen  # each handed on as it finished
    assert [f.process for f in figs] == ["sequential", "burst", "poisson", "poisson"]
    single, burst, *middle = figs
    assert single.in_flight_peak == 1 and burst.target_rps == math.inf
    # Four slots hold more than one request at a time (the service is sleep, not CPU).
    assert burst.request_rps > single.request_rps
    assert single.request_rps < middle[0].target_rps < middle[1].target_rps < burst.request_rps
    assert all(f.completed > 0 and f.goodput_rps is not None for f in figs)


def test_an_engine_that_does_not_batch_is_swept_up_to_its_capacity() -> None:
    engine = StubEngine(slots=1, prefill_s=0.01, tpot_s=0.01)
    figs, _ = sweep(engine, rates=2, per_rate_s=0.4, budget_s=30)
    _, burst, *middle = figs
    assert len(middle) == 2
    assert 0 < middle[0].target_rps < middle[1].target_rps < burst.request_rps


def test_a_spent_budget_skips_the_remaining_rates_with_the_reason() -> None:
    engine = StubEngine(slots=2, prefill_s=0.02, tpot_s=0.02)
    figs, _ = sweep(engine, rates=3, per_rate_s=0.5, budget_s=0.8)
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


def test_an_engine_that_dies_stops_the_sweep_and_keeps_the_rates_it_finished() -> None:
    engine = DiesOnce()
    engine.first_middle = 10**9
    finished: list[RateFigures] = []

    async def go() -> list[RateFigures]:
        await engine.start()

        def on_rate(fig: RateFigures) -> None:
            finished.append(fig)
            if fig.process == "burst":  # the next request made is the first rate's first
                engine.first_middle = -1

        try:
            return await run_sweep(engine, make, 2, 0.3, 30, "poisson", Bounds(), 0, on_rate)
        finally:
            await engine.stop()

    with pytest.raises(SweepStopped, match="engine died: killed mid-sweep during rate '"):
        asyncio.run(go())
    # The rate it died in is not finished: only the two ends were handed on.
    assert [f.process for f in finished] == ["sequential", "burst"]
    assert engine.starts == 1  # not restarted: a resume starts a fresh one

    # Resumed from the two it kept: only the rates between run, on a fresh engine.
    figs, seen = sweep(StubEngine(slots=2, prefill_s=0.005, tpot_s=0.005), 2, 0.3, 30, finished)
    assert figs[:2] == finished and [f.process for f in figs] == [
        "sequential", "burst", "poisson", "poisson",
    ]  # fmt: skip
    assert len(seen) == 2 and all(f.completed > 0 for f in figs[2:])
    between_ends = between(finished[0].request_rps, finished[1].request_rps, 2)
    assert [f.target_rps for f in figs[2:]] == pytest.approx(between_ends)


def test_a_resumed_sweep_counts_its_kept_rates_time_against_the_budget() -> None:
    engine = StubEngine(slots=2, prefill_s=0.005, tpot_s=0.005)
    ends, _ = sweep(engine, rates=0, per_rate_s=0.3, budget_s=30)
    spent = [f.model_copy(update={"duration_s": 100.0}) for f in ends]
    figs, _ = sweep(engine, rates=2, per_rate_s=0.3, budget_s=30, kept=spent)
    assert [f.ended_by for f in figs[2:]] == ["sweep budget of 30 s spent"] * 2
