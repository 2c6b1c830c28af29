"""A rate sweep in bounded time, as GuideLLM's "sweep" profile runs one: one request at a
time first, then every request at once (the engine's maximum throughput), then `rates`
rates evenly spaced strictly between the two, each held for about `per_rate_s`. An
engine that does not batch sustains no more all at once than one at a time; its rates
are spread between zero and that maximum instead, the curve of its queue.

The user's `budget_s` bounds the whole sweep. Before each rate the sweep checks what is
left: a rate that cannot get at least a third of its time is skipped with that reason,
and one that can get less than its full time is shortened (its request count cut) and
says so. Every rate's figures are handed to `on_rate` as it finishes (to be stored at
once). An engine that dies ends the sweep (SweepStopped): the rate it died in is not
finished, the rates before it are kept, and a resume goes on from them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from stackcost.result import RateFigures, Spread
from stackcost.serving import client
from stackcost.serving.arrivals import Process, schedule
from stackcost.serving.engine import Engine, Request
from stackcost.serving.records import figures

# Requests the one-at-a-time rate and the all-at-once rate send at least (their
# percentiles need a few), and the most the all-at-once rate sends.
MIN_REQUESTS = 4
MAX_BURST = 256
# One at a time sends until its time is up; this many are made ready (a fast engine's).
SEQUENTIAL_REQUESTS = 1024
# A rate may run over its scheduled time by this factor while its queue drains; after
# that it is cut (its unfinished requests recorded as cut), so an overloaded rate cannot
# eat the budget.
DRAIN = 2.0
# A rate that would get less than this share of its time is skipped.
MIN_SHARE = 1 / 3
# Rates between the ends: a curve of more points than this is not worth its time.
MAX_RATES = 64

MakeRequests = Callable[[int, int], list[Request]]  # (first index, count) -> requests


@dataclass(frozen=True)
class Bounds:
    ttft_ms: float | None = None
    tpot_ms: float | None = None


def plan_problem(rates: int, per_rate_s: float, budget_s: float) -> str | None:
    """Why a sweep of `rates` rates between, each held `per_rate_s`, does not fit its
    `budget_s`, or None. The budget must hold the whole plan at full time: the two ends
    and every rate between (shortening by the budget is for an engine slower than
    planned, which drains past its time, not for a plan that never fit)."""
    if not 0 <= rates <= MAX_RATES:
        return f"serve-rates {rates} is outside 0..{MAX_RATES} (rates between the two ends)"
    fits = math.floor(budget_s / per_rate_s + 1e-9) - 2
    if fits < 0:
        return (
            f"serve-budget {budget_s:g} s is less than the sweep's two ends need at serve-time "
            f"{per_rate_s:g} s (one at a time, then all at once: at least {2 * per_rate_s:g} s)"
        )
    if rates > fits:
        return (
            f"serve-rates {rates} does not fit serve-budget {budget_s:g} s at serve-time "
            f"{per_rate_s:g} s: it holds the two ends and at most {fits} rates between "
            f"(allowed: 0..{min(fits, MAX_RATES)}, or a larger budget)"
        )
    return None


def between(low_rps: float, high_rps: float, count: int) -> list[float]:
    """`count` rates evenly spaced strictly between `low_rps` and `high_rps`."""
    if count < 1 or not high_rps > low_rps:
        return []
    step = (high_rps - low_rps) / (count + 1)
    return [low_rps + step * (i + 1) for i in range(count)]


class SweepStopped(RuntimeError):
    """The engine died during a rate: that rate is not finished, and the sweep stops
    there. The rates finished before it are kept (handed to `on_rate` as each ended), and
    a resume goes on from them with a fresh engine."""


async def run_sweep(
    engine: Engine,
    make_requests: MakeRequests,
    rates: int,
    per_rate_s: float,
    budget_s: float,
    process: Process,
    bounds: Bounds,
    seed: int,
    on_rate: Callable[[RateFigures], Awaitable[None] | None],
    kept: Sequence[RateFigures] = (),
) -> list[RateFigures]:
    """The sweep's rates, in order: those in `kept` (a resumed sweep's finished rates,
    not run again: their time counts against the budget), then the rest, each handed
    to `on_rate` as it finishes. SweepStopped when the engine dies."""
    started = time.perf_counter() - sum(f.duration_s for f in kept)
    done: list[RateFigures] = list(kept)
    next_index = sum(f.sent for f in kept)  # the requests' seeds go on, not repeat
    slo = (bounds.ttft_ms, bounds.tpot_ms)

    def left_s() -> float:
        return budget_s - (time.perf_counter() - started)

    async def keep(fig: RateFigures) -> None:
        if fig.ended_by is not None and fig.ended_by.startswith("engine died"):
            raise SweepStopped(f"{fig.ended_by} during rate {fig.label!r}")
        done.append(fig)
        maybe = on_rate(fig)
        if maybe is not None:
            await maybe

    # 1. One at a time: unloaded latencies, and the low end of the sweep.
    if len(done) < 1:
        requests = make_requests(next_index, SEQUENTIAL_REQUESTS)
        next_index += len(requests)
        first = await client.one_at_a_time(engine, requests, limit_s=min(per_rate_s, left_s()))
        await keep(figures(first, "one at a time", None, "sequential", *slo, None))
    single = done[0]
    unloaded_ttft = single.ttft_ms.p50
    low = single.request_rps
    # 2. All at once: the engine's maximum throughput, and the high end (given a third of
    # its time at least, as any rate).
    # As many as one at a time answered in its time: a batching engine answers them sooner,
    # one that does not in about that time, inside the drain limit either way.
    if len(done) < 2:
        burst_count = min(MAX_BURST, max(MIN_REQUESTS, math.ceil(low * per_rate_s)))
        requests = make_requests(next_index, burst_count)
        next_index += burst_count
        limit = min(per_rate_s * DRAIN, left_s())
        burst = await client.drive(engine, requests, [0.0] * burst_count, limit_s=limit)
        await keep(figures(burst, "max throughput", math.inf, "burst", *slo, unloaded_ttft))
    # 3. Rates between (from zero where the engine does not batch: see the docstring).
    high = done[1].request_rps
    for i, rate in enumerate(between(low if high > low else 0.0, high, rates)):
        if i + 2 < len(done):
            continue  # finished before the sweep was resumed
        label = f"{rate:.3g} req/s"
        share = min(1.0, left_s() / (per_rate_s * DRAIN))
        if share < MIN_SHARE:
            await keep(_skipped(label, rate, process, f"sweep budget of {budget_s:g} s spent"))
            continue
        count = max(MIN_REQUESTS, math.ceil(rate * per_rate_s * share))
        requests = make_requests(next_index, count)
        next_index += count
        offsets = schedule(rate, count, process, seed + i)
        drv = await client.drive(
            engine, requests, list(offsets), limit_s=per_rate_s * share * DRAIN
        )
        fig = figures(drv, label, rate, process, *slo, unloaded_ttft)
        if share < 1.0:
            fig.errors.append(f"shortened to {share:.0%} of --serve-time by the sweep budget")
        await keep(fig)
    return done


def _skipped(label: str, rate: float, process: str, why: str) -> RateFigures:
    empty = Spread()
    return RateFigures(
        label=label, target_rps=rate, process=process, sent=0, completed=0, failed=0,
        duration_s=0.0, request_rps=0.0, output_tokens_per_s=0.0, goodput_rps=None,
        ttft_ms=empty, tpot_ms=empty, itl_ms=empty, e2e_ms=empty, queueing_ms=empty,
        lateness_ms=empty, in_flight_peak=0, ended_by=why,
    )  # fmt: skip
