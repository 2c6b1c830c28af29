"""Serving a decoder under load (`--scenario serve`): a request-rate sweep through the
rung's own batching engine (serving/: the load generator, the engines, the sweep).

One repetition:
1. builds the decoder and verifies the rung's generator by teacher forcing, as the
   generate scenario does (scenarios/generate.py); a rung outside tolerance is `wrong`
   and serves nothing;
2. builds the rung's engine from that generator's weights (serving/engines/), starts it,
   and records whether its greedy tokens for the verified prompt are the generator's
   (information: continuous batching computes attention another way, so a near tie under
   random weights may break otherwise);
3. sweeps: one request at a time, all at once, then the cell's rates between, within
   its budget (serving/sweep.py). Requests carry seeded prompts of the cell's lengths.
   Each rate is handed to the parent as it finishes (scenarios/progress.py), which
   stores it at once, and printed. An engine that dies stops the sweep: the repetition
   fails, keeping the rates it finished, and a resume goes on from them (task.kept_rates).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TYPE_CHECKING

from stackcost.scenarios.base import Bench, Scenario, wrong
from stackcost.scenarios.settings import SERVE

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from stackcost.cell import ServeConfig
    from stackcost.measure.disturbance import Disturbance
    from stackcost.result import Memory, RateFigures, RepetitionResult, ServeResult
    from stackcost.scenarios.generate import Verified
    from stackcost.serving.engine import Engine, Request
    from stackcost.verify import Verification


class Serve(Scenario):
    name = SERVE  # its name in the registry (scenarios/registry.py)

    def run(self, bench: Bench) -> RepetitionResult:
        from stackcost.measure.counters import Edge, Window
        from stackcost.measure.disturbance import assess
        from stackcost.result import RepetitionResult, ServeResult
        from stackcost.scenarios import progress
        from stackcost.scenarios.generate import verified_generators
        from stackcost.serving.engines import EngineUnavailable, engine_for, why_not
        from stackcost.serving.lengths import longest
        from stackcost.serving.sweep import SweepStopped

        task, cell = bench.task, bench.cell
        config = cell.serve
        assert config is not None
        # The runner refuses these before any worker (serving/engines: why_not); a task
        # built by hand still gets the reason rather than a crash.
        if (problem := why_not(cell)) is not None:
            return RepetitionResult(status="unsupported", reason=problem)
        make_engine = engine_for(cell.backend)
        assert make_engine is not None
        ready = verified_generators(bench, rows=1)
        if isinstance(ready, RepetitionResult):
            return ready
        generator = ready.generators[0]
        if (why := wrong(ready.verification, task.tolerance)) is not None:
            return RepetitionResult(
                status="wrong", reason=why, verification=ready.verification,
                memory=ready.memory.read(), details=generator.details,
            )  # fmt: skip
        prompt_len, new_tokens = cell.sizes["prompt_len"], cell.sizes["new_tokens"]
        vocab = generator.decoder.config.vocab_size
        try:
            engine = make_engine(generator, longest(config.lengths, prompt_len, new_tokens))
        except EngineUnavailable as exc:
            return RepetitionResult(status="unavailable", reason=str(exc))
        rates: list[RateFigures] = list(task.kept_rates)  # a resumed sweep's finished ones

        def make_requests(first: int, count: int) -> list[Request]:
            return requests_for(
                config.lengths, vocab, prompt_len, new_tokens, first, count, cell.model.seed
            )

        async def on_rate(fig: RateFigures) -> None:
            progress.append(task.workdir, len(rates), fig)  # the parent stores it now
            rates.append(fig)
            print(f"serve {cell.backend}: {describe(fig)}", file=sys.stderr, flush=True)

        first = Edge.now()
        try:
            engine_agreement, elapsed = asyncio.run(
                serve(
                    engine, ready, config, make_requests, on_rate, task.kept_rates,
                    cell.model.seed, new_tokens,
                )
            )  # fmt: skip
        except SweepStopped as exc:
            return RepetitionResult(
                status="failed", reason=str(exc), kept_rates=rates, verification=ready.verification,
                memory=ready.memory.read(), details=generator.details,
            )  # fmt: skip
        window = Window.between(first, Edge.now())
        bench.phases.timed_s = (window.end_ns - window.start_ns) / 1e9
        sweep = ServeResult(
            engine=engine.batching, transport=engine.transport, prompt_len=prompt_len,
            new_tokens=new_tokens, lengths=config.lengths, arrivals=config.arrivals,
            engine_agreement=engine_agreement, rates=rates, budget_s=config.budget_s,
            elapsed_s=elapsed,
        )  # fmt: skip
        details = {
            **generator.details,
            "engine": {
                "batching": engine.batching,
                "transport": engine.transport,
                **engine.details,
            },
            "thread_env": bench.thread_env(),
        }
        return swept(sweep, ready.verification, ready.memory.read(), details, assess(window))


async def serve(
    engine: Engine,
    ready: Verified,
    config: ServeConfig,
    make_requests: Callable[[int, int], list[Request]],
    on_rate: Callable[[RateFigures], Awaitable[None]],
    kept: list[RateFigures],
    seed: int,
    new_tokens: int,
) -> tuple[float | None, float]:
    """Start the engine, check its greedy tokens against the verified generator's for the
    verified prompt (None where it cannot say), sweep, stop it: (agreement, sweep seconds)."""
    import numpy as np

    from stackcost.scenarios.generate import agreement
    from stackcost.serving.sweep import Bounds, run_sweep

    await engine.start()
    try:
        try:
            got = await engine.greedy(ready.prompt[0].tolist(), new_tokens)
        except NotImplementedError:
            same = None
        else:
            same, _ = agreement(np.asarray([got]), ready.cold.tokens[:1])
        t0 = time.perf_counter()
        await run_sweep(
            engine, make_requests, config.rates, config.per_rate_s, config.budget_s,
            config.arrivals, Bounds(config.ttft_bound_ms, config.tpot_bound_ms), seed, on_rate,
            kept,
        )  # fmt: skip
        return same, time.perf_counter() - t0
    finally:
        await engine.stop()


def swept(
    sweep: ServeResult,
    verification: Verification | None,
    memory: Memory | None,
    details: dict,
    disturbance: Disturbance,
) -> RepetitionResult:
    """A finished sweep's repetition: ok where some rate completed a request (its
    throughput the fastest rate's output tokens/s), failed with every rate's reason where
    none did."""
    from stackcost.result import RepetitionResult

    served = [f for f in sweep.rates if f.completed]
    status, reason = "ok", ""
    if not served:
        status, reason = (
            "failed",
            "no rate completed a request: "
            + "; ".join(e for f in sweep.rates for e in f.errors + [f.ended_by or ""] if e),
        )
    return RepetitionResult(
        status=status,
        reason=reason,
        throughput=max((f.output_tokens_per_s for f in served), default=None),
        memory=memory,
        verification=verification,
        details={**details, "throughput": "output tokens/s of the sweep's fastest rate"},
        disturbance=disturbance,
        serving=sweep,
    )


def requests_for(
    lengths: str, vocab: int, prompt_len: int, new_tokens: int, first: int, count: int, seed: int
) -> list[Request]:
    """Requests `first` .. `first + count - 1`: seeded prompt ids of each one's length."""
    import numpy as np

    from stackcost.serving.engine import Request
    from stackcost.serving.lengths import draw

    out = []
    for i, size in enumerate(
        draw(lengths, prompt_len, new_tokens, count, seed + first), start=first
    ):
        ids = np.random.default_rng((seed, i)).integers(0, vocab, size.prompt)
        out.append(Request(i, tuple(int(t) for t in ids), size.output))
    return out


def describe(fig: RateFigures) -> str:
    """One line of a rate, as it finishes."""
    if fig.completed == 0:
        return f"{fig.label}: nothing completed ({fig.ended_by or '; '.join(fig.errors)})"
    line = (
        f"{fig.label}: {fig.completed}/{fig.sent} done, {fig.request_rps:.3g} req/s, "
        f"TTFT p50 {fig.ttft_ms.p50:.0f} ms p99 {fig.ttft_ms.p99:.0f} ms"
    )
    if fig.tpot_ms.p50 is not None:
        line += f", TPOT p50 {fig.tpot_ms.p50:.1f} ms"
    if fig.goodput_rps is not None:
        line += f", goodput {fig.goodput_rps:.3g} req/s"
    return line
