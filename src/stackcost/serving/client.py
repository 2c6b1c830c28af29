"""The load generator: sends a schedule of requests to an engine, open loop, and stamps
every streamed token as it reaches the client.

Each request is its own asyncio task, asleep until its send time; a slow engine makes
requests pile up in flight, never arrive later (the schedule is fixed in advance). The
clock is time.perf_counter_ns. What the client itself costs is measured, not assumed:
`lateness` is how late each request left against its schedule (asyncio's timers wake on
millisecond ticks), and benchmarks/serve_client.py measures the delay between an engine
emitting a token and the client stamping it.

A request that fails is a record with its error; the rate goes on. An engine that dies
(EngineDied) ends the rate: every request still in flight is recorded with that reason.
A rate that reaches its time limit stops the same way, its unfinished requests so marked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from stackcost.serving.engine import Engine, EngineDied, Request

# How often the requests in flight (and the engine's own counts) are sampled, in seconds.
OCCUPANCY_EVERY_S = 0.05
# The schedule starts this long after drive() is called, so the first send is not late
# by the time it takes to create the tasks.
LEAD_S = 0.02


@dataclass
class RequestRecord:
    """One request as the client saw it; times in perf_counter_ns."""

    index: int
    prompt_len: int
    new_tokens: int
    scheduled_ns: int
    sent_ns: int | None = None  # None: never sent (the rate ended first)
    arrivals: list[tuple[int, int]] = field(default_factory=list)  # (ns, tokens in it)
    error: str | None = None

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.arrivals)

    @property
    def complete(self) -> bool:
        return self.error is None and self.sent_ns is not None and self.tokens == self.new_tokens

    @property
    def ttft_ns(self) -> int:
        return self.arrivals[0][0] - self.sent_ns  # type: ignore[operator]

    @property
    def e2e_ns(self) -> int:
        return self.arrivals[-1][0] - self.sent_ns  # type: ignore[operator]

    @property
    def tpot_ns(self) -> float | None:
        """Mean time per output token after the first (vLLM's TPOT); None for one token."""
        if self.tokens < 2:
            return None
        return (self.arrivals[-1][0] - self.arrivals[0][0]) / (self.tokens - 1)

    @property
    def itl_ns(self) -> list[int]:
        """Gaps between consecutive arrivals (vLLM's ITL: a chunk of tokens is one gap)."""
        stamps = [ns for ns, _ in self.arrivals]
        return [b - a for a, b in zip(stamps[:-1], stamps[1:], strict=True)]

    @property
    def lateness_ns(self) -> int:
        return self.sent_ns - self.scheduled_ns  # type: ignore[operator]


@dataclass
class Drive:
    """What one rate's load produced."""

    records: list[RequestRecord]
    start_ns: int  # the schedule's zero
    end_ns: int  # the last arrival, or when the rate was cut
    # (seconds since start, requests in flight, engine running, engine queued)
    occupancy: list[tuple[float, int, int | None, int | None]]
    in_flight_peak: int
    ended_by: str | None = None  # why the rate stopped early: engine died, time limit


async def drive(
    engine: Engine,
    requests: Sequence[Request],
    offsets_s: Sequence[float],
    limit_s: float | None = None,
) -> Drive:
    """Send `requests[i]` at `offsets_s[i]` seconds and collect every answer, or stop at
    `limit_s` seconds after the start, the unfinished requests recorded as such."""
    if len(requests) != len(offsets_s):
        raise ValueError("one send time per request")
    start_ns = time.perf_counter_ns() + int(LEAD_S * 1e9)
    records = [
        RequestRecord(r.index, len(r.prompt), r.new_tokens, start_ns + int(t * 1e9))
        for r, t in zip(requests, offsets_s, strict=True)
    ]
    state = _InFlight()
    tasks = [
        asyncio.create_task(_send(engine, r, rec, state))
        for r, rec in zip(requests, records, strict=True)
    ]
    sampler = asyncio.create_task(_sample(engine, state, start_ns))
    ended_by = None
    try:
        done = asyncio.gather(*tasks)
        await asyncio.wait_for(done, timeout=None if limit_s is None else limit_s + LEAD_S)
    except TimeoutError:
        ended_by = f"time limit of {limit_s:g} s reached"
    except EngineDied as exc:
        ended_by = f"engine died: {exc}"
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    end_ns = max((rec.arrivals[-1][0] for rec in records if rec.arrivals), default=start_ns)
    if ended_by is not None:
        end_ns = time.perf_counter_ns()
        for rec in records:
            if not rec.complete and rec.error is None:
                rec.error = ended_by if rec.sent_ns is not None else f"not sent: {ended_by}"
    return Drive(records, start_ns, end_ns, state.samples, state.peak, ended_by)


@dataclass
class _InFlight:
    now: int = 0
    peak: int = 0
    samples: list[tuple[float, int, int | None, int | None]] = field(default_factory=list)


async def _send(engine: Engine, request: Request, rec: RequestRecord, state: _InFlight) -> None:
    wait_s = (rec.scheduled_ns - time.perf_counter_ns()) / 1e9
    if wait_s > 0:
        await asyncio.sleep(wait_s)
    rec.sent_ns = time.perf_counter_ns()
    state.now += 1
    state.peak = max(state.peak, state.now)
    try:
        async for count in engine.stream(request):
            rec.arrivals.append((time.perf_counter_ns(), count))
        if rec.tokens != rec.new_tokens:
            rec.error = f"engine returned {rec.tokens} of {rec.new_tokens} tokens"
    except EngineDied:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed request is a record, the rate goes on
        rec.error = f"{type(exc).__name__}: {exc}"
    finally:
        state.now -= 1


async def _sample(engine: Engine, state: _InFlight, start_ns: int) -> None:
    while True:
        t = (time.perf_counter_ns() - start_ns) / 1e9
        state.samples.append((t, state.now, engine.running(), engine.queued()))
        await asyncio.sleep(OCCUPANCY_EVERY_S)


async def one_at_a_time(
    engine: Engine, requests: Sequence[Request], limit_s: float | None = None
) -> Drive:
    """Send each request when the one before it has finished (concurrency 1), until all
    are sent or `limit_s` has passed (the rest are not needed, so not recorded): the
    unloaded latencies, and the rate a sweep starts from."""
    start_ns = time.perf_counter_ns()
    records: list[RequestRecord] = []
    state = _InFlight()
    sampler = asyncio.create_task(_sample(engine, state, start_ns))
    ended_by = None
    try:
        for request in requests:
            if limit_s is not None and time.perf_counter_ns() - start_ns > limit_s * 1e9:
                break
            # Due as soon as the one before it ended.
            rec = RequestRecord(
                request.index, len(request.prompt), request.new_tokens, time.perf_counter_ns()
            )
            records.append(rec)
            await _send(engine, request, rec, state)
    except EngineDied as exc:
        ended_by = f"engine died: {exc}"
        records[-1].error = ended_by
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    end_ns = max((rec.arrivals[-1][0] for rec in records if rec.arrivals), default=start_ns)
    return Drive(records, start_ns, end_ns, state.samples, state.peak, ended_by)
