"""One rate's figures from its requests' records, in the terms vLLM's benchmark_serving
and GuideLLM report: TTFT, TPOT and ITL at p50/p90/p99, request and output-token
throughput, and goodput (requests/s that met every bound).

- TTFT = first token at the client - request sent: queueing in the engine, prefill and
  the first token.
- TPOT = (last token - first token) / (tokens - 1), one figure per request.
- ITL = every gap between consecutive arrivals, pooled over the requests.
- Throughput divides completed requests (and their output tokens) by the rate's
  duration: its first send to its last arrival.
- Goodput counts completed requests whose TTFT and TPOT are both within the bounds.
- Queueing delay is what the engine adds over an unloaded request: TTFT minus the
  median TTFT of the sweep's one-at-a-time rate. It is an estimate (the engine does not
  report when a request got its slot) and is labelled so.
- A percentile rests on enough requests when at least BEYOND of them lie past it: p50
  needs 20, p90 100, p99 1000 (`enough`). With fewer, the p99 of a rate is close to its
  maximum, and every view marks it so (a rate's request count is its rate times its
  time: a longer --serve-time gives its tail more).
"""

from __future__ import annotations

import math

from stackcost.result import RateFigures, Spread
from stackcost.serving.client import Drive


def figures(
    drive: Drive,
    label: str,
    target_rps: float | None,
    process: str,
    ttft_bound_ms: float | None,
    tpot_bound_ms: float | None,
    unloaded_ttft_ms: float | None,
) -> RateFigures:
    done = [r for r in drive.records if r.complete]
    sent = [r for r in drive.records if r.sent_ns is not None]
    first_send = min((r.sent_ns for r in sent), default=drive.start_ns)
    duration_s = max((drive.end_ns - first_send) / 1e9, 1e-9)
    ttft = [r.ttft_ns for r in done]
    tpot = [t for r in done if (t := r.tpot_ns) is not None]
    goodput = None
    if ttft_bound_ms is not None or tpot_bound_ms is not None:
        good = [r for r in done if _within(r.ttft_ns, r.tpot_ns, ttft_bound_ms, tpot_bound_ms)]
        goodput = len(good) / duration_s
    queueing = []
    if unloaded_ttft_ms is not None:
        queueing = [max(0.0, t - unloaded_ttft_ms * 1e6) for t in ttft]
    errors = list(dict.fromkeys(r.error for r in drive.records if r.error is not None))
    return RateFigures(
        label=label,
        target_rps=target_rps,
        process=process,
        sent=len(sent),
        completed=len(done),
        failed=len(drive.records) - len(done),
        duration_s=duration_s,
        request_rps=len(done) / duration_s,
        output_tokens_per_s=sum(r.tokens for r in done) / duration_s,
        goodput_rps=goodput,
        ttft_ms=Spread.of(ttft),
        tpot_ms=Spread.of(tpot),
        itl_ms=Spread.of([g for r in done for g in r.itl_ns]),
        e2e_ms=Spread.of([r.e2e_ns for r in done]),
        queueing_ms=Spread.of(queueing),
        lateness_ms=Spread.of([r.lateness_ns for r in sent]),
        in_flight_peak=drive.in_flight_peak,
        occupancy=drive.occupancy,
        errors=errors,
        ended_by=drive.ended_by,
    )


def held(fig: RateFigures, ttft_bound_ms: float | None, tpot_bound_ms: float | None) -> bool:
    """Whether a rate kept its p99 TTFT and p99 TPOT within the SLOs (as LoadGen's Server
    judges a QPS), with every request it sent completed."""
    if fig.completed == 0 or fig.failed:
        return False
    if ttft_bound_ms is not None and (fig.ttft_ms.p99 or math.inf) > ttft_bound_ms:
        return False
    return tpot_bound_ms is None or fig.tpot_ms.p99 is None or fig.tpot_ms.p99 <= tpot_bound_ms


def highest_held(
    rates: list[RateFigures], ttft_bound_ms: float | None, tpot_bound_ms: float | None
) -> RateFigures | None:
    """The highest achieved arrival rate of a sweep held within the SLO (`held`). All at
    once is not a rate a server sustains (its requests arrive in one instant), so it is
    not a candidate."""
    kept = [f for f in rates if f.process != "burst" and held(f, ttft_bound_ms, tpot_bound_ms)]
    return max(kept, key=lambda f: f.request_rps, default=None)


# Requests a percentile needs beyond it to say something of the tail, not of one request.
BEYOND = 10
ENOUGH_NOTE = (
    f"† rests on too few requests: a percentile needs {BEYOND} requests beyond it "
    f"(p50 {2 * BEYOND}, p90 {10 * BEYOND}, p99 {100 * BEYOND}); with fewer, p99 is about "
    "the maximum"
)


def needed(percentile: float) -> int:
    """Requests (or gaps) a `percentile` (50, 90, 99) rests on: BEYOND of them past it."""
    return round(BEYOND / (1 - percentile / 100))


def enough(spread: Spread, percentile: float) -> bool:
    return spread.count >= needed(percentile)


def _within(
    ttft_ns: float, tpot_ns: float | None, ttft_bound_ms: float | None, tpot_bound_ms: float | None
) -> bool:
    if ttft_bound_ms is not None and ttft_ns / 1e6 > ttft_bound_ms:
        return False
    return tpot_bound_ms is None or tpot_ns is None or tpot_ns / 1e6 <= tpot_bound_ms
