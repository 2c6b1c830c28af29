"""Serving generated tokens under MLPerf's LoadGen: Server and Offline with token latencies
(`--scenario generate,server` / `generate,offline`: mode generate cells with a LoadGen
config), as MLPerf's LLM benchmarks measure them.

One repetition:
1. builds the decoder and verifies the rung's generator by teacher forcing, as the generate
   scenario does (scenarios/generate.py): one generator per instance, each verified on
   the first prompt of the query sample library; a rung outside tolerance is `wrong`;
2. calibrates: back-to-back generations of that prompt, whose median end-to-end time is
   what LoadGen is told to expect of one sample (Server's starting QPS, Offline's
   expected QPS). Their TTFT and TPOT are kept as the repetition's unloaded generation
   numbers;
3. runs LoadGen with use_token_latencies. A sample is one sequence: one prompt of
   prompt_len ids (batch 1) from QSL_SAMPLES seeded prompts, answered by one generation
   of new_tokens tokens. The first token is reported to LoadGen as it is ready
   (FirstTokenComplete, from the generator's on_token), the sample completed with its
   token count, so LoadGen times TTFT and TPOT itself. Server searches the highest QPS
   whose p99 TTFT and p99 TPOT stay under the cell's bounds; Offline reports tokens/s.
   Every number is LoadGen's (its summary keeps TTFT/TPOT p50/p90/p99).

A TTFT bound of seconds tolerates seconds of backlog: a Server test shorter than that can
pass a QPS the instances cannot sustain (MLPerf runs 600 s). Such a run, whose completed
samples/s fell well short of the scheduled, is `unstable` with that reason.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.cell import GENERATE
from stackcost.scenarios.base import Bench, Scenario, wrong
from stackcost.scenarios.generate import prompt_ids, token_numbers, token_timing
from stackcost.scenarios.loadgen import CALIBRATION_MIN_STEPS, CALIBRATION_S, _verdict
from stackcost.scenarios.settings import KINDS, LoadGenKind
from stackcost.scenarios.sut import QSL_SAMPLES, StepServer

if TYPE_CHECKING:
    import numpy as np

    from stackcost.cell import Cell
    from stackcost.generation.base import Generator, OnToken
    from stackcost.generation.metrics import TokenTiming
    from stackcost.result import RepetitionResult, ScenarioResult

# A sample's answer: its prompt's index in the QSL, told as each token is ready -> tokens.
Answer = Callable[[int, "OnToken"], "np.ndarray"]

# LoadGen's summary lines for token latencies (mlcommons-loadgen 6.0), as recorded ms.
TOKEN_LATENCY_KEYS = {
    "ttft": "{q:.2f} percentile first token latency (ns)",
    "tpot": "{q:.2f} percentile time to output token (ns)",
}
PERCENTILES = (50, 90, 99)
TOKEN_KINDS = tuple(name for name, kind in KINDS.items() if kind.tokens is not None)
# LoadGen's own token rate: Offline's headline line, Server's "Completed tokens per second".
TOKEN_RATE_KEYS = ("Tokens per second", "Completed tokens per second")
# Server kept up when it completed at least this fraction of the samples/s LoadGen
# scheduled (near the peak a short test's drain alone costs a few percent).
KEPT_UP = 0.9


class TokenServer(StepServer):
    """Answers each sample with one generation of its prompt: its first token reported as
    it is ready (LoadGen's TTFT), the sample completed with its token count (TPOT)."""

    def run_sample(self, step: Callable[..., Any], sample_id: int, index: int) -> Any:
        def on_token(i: int) -> None:
            if i == 0:
                # No data: on_token tells the moment, not the token, and LoadGen reads a
                # response's data only in accuracy mode, which is not run here.
                self.lg.FirstTokenComplete([self.lg.QuerySampleResponse(sample_id, 0, 0, 1)])

        return step(index, on_token)

    def response(self, sample_id: int, output: Any) -> Any:
        if output is None:  # the generation failed: completed anyway, raised after the test
            return super().response(sample_id, output)
        # The tokens themselves: `output` is held by the caller until completed.
        return self.lg.QuerySampleResponse(
            sample_id, output.ctypes.data, output.nbytes, output.size
        )


def answer_with(generator: Generator, prompts: np.ndarray, new_tokens: int) -> Answer:
    """One instance's answer to a sample: greedy generation after prompt `index`."""
    import numpy as np

    def answer(index: int, on_token: OnToken) -> np.ndarray:
        out = generator.generate(prompts[index : index + 1], new_tokens, on_token)
        return np.ascontiguousarray(out.tokens, dtype=np.int64)

    return answer


def token_latencies_ms(s: ScenarioResult) -> dict[str, float]:
    """LoadGen's TTFT and TPOT percentiles in ms ({"ttft_p99_ms": ...}), from its summary;
    empty where it wrote none (Offline reports no token latencies)."""
    out = {}
    for name, key in TOKEN_LATENCY_KEYS.items():
        for q in PERCENTILES:
            value = s.summary.get(key.format(q=q))
            if isinstance(value, float):
                out[f"{name}_p{q}_ms"] = value / 1e6
    return out


def token_rate(s: ScenarioResult) -> float | None:
    """LoadGen's generated tokens/s, whichever line its scenario writes."""
    for key in TOKEN_RATE_KEYS:
        if isinstance(value := s.summary.get(key), float):
            return value
    return None


def fell_behind(s: ScenarioResult) -> str | None:
    """Why a Server run's QPS is not one the instances sustain, or None."""
    done = s.summary.get("Completed samples per second")
    asked = s.summary.get("Scheduled samples per second")
    if not (isinstance(done, float) and isinstance(asked, float)) or done >= KEPT_UP * asked:
        return None
    return (
        f"the server fell behind: {done:.3g} samples/s completed of {asked:.3g} scheduled; "
        "the bounds held only while the backlog was short (a longer --loadgen-min-duration)"
    )


class TokenServing(Scenario):
    """One of LoadGen's Server or Offline serving generated tokens (mode generate)."""

    def __init__(self, kind: LoadGenKind) -> None:
        self.kind = kind
        self.name = f"{GENERATE} {kind.name}"

    def run(self, bench: Bench) -> RepetitionResult:
        from stackcost.measure.counters import Edge, Window
        from stackcost.measure.disturbance import assess
        from stackcost.result import RepetitionResult
        from stackcost.scenarios.generate import verified_generators
        from stackcost.scenarios.sut import run_scenario

        task, cell, phases = bench.task, bench.cell, bench.phases
        config = cell.scenario
        assert config is not None
        if (refused := self._refused(cell)) is not None:
            return refused
        ready = verified_generators(bench, rows=1, count=config.instances)
        if isinstance(ready, RepetitionResult):
            return ready
        generator = ready.generators[0]
        prompt_len, new_tokens = cell.sizes["prompt_len"], cell.sizes["new_tokens"]
        # Row 0 is the verified prompt: the same seed draws the same first row.
        prompts = prompt_ids(
            generator.decoder.config.vocab_size, QSL_SAMPLES, prompt_len, cell.model.seed
        )

        timings = _calibrate(bench, generator, prompts[:1])
        unloaded = token_numbers(
            generator,
            cell,
            timings,
            token_timing(ready.cold, prompt_len),
            ready.token_agreement,
            ready.agreeing_prefix,
        )
        step_ns = statistics.median(t.e2e_ns for t in timings)

        first = Edge.now()
        s = run_scenario(
            config,
            [answer_with(g, prompts, new_tokens) for g in ready.generators],
            step_ns,
            Path(task.workdir) / "loadgen" / config.name,
            server=TokenServer,
            tokens=True,
        )
        window = Window.between(first, Edge.now())
        phases.timed_s = (window.end_ns - window.start_ns) / 1e9
        status, reason = _verdict(s, wrong(ready.verification, task.tolerance))
        if (behind := fell_behind(s)) is not None:
            s.notes.append(behind)
            if status == "ok":
                status, reason = "unstable", behind
        return RepetitionResult(
            status=status,
            reason=reason,
            cold_start_ms=unloaded.cold_ms,
            warmup_iters=len(timings),
            throughput=token_rate(s),
            memory=ready.memory.read(),
            verification=ready.verification,
            generation=unloaded,
            details={
                **generator.details,
                "generator": generator.details.get("generator", generator.api),
                "instances": len(ready.generators),
                "thread_env": bench.thread_env(),
                "prompts": f"{QSL_SAMPLES} x {prompt_len} ids from seed {cell.model.seed}, "
                "one a sample",
                "token_latencies_ms": token_latencies_ms(s),
                "generation": "unloaded: the calibration's back-to-back generations",
            },
            disturbance=assess(window),
            scenario=s,
        )

    def _refused(self, cell: Cell) -> RepetitionResult | None:
        """Why this cell is not served here (the spec refuses both; a cell built by hand
        may not): a LoadGen kind without token latencies, or a batch over one sequence."""
        from stackcost.result import RepetitionResult

        if self.kind.tokens is None:
            return RepetitionResult(
                status="unsupported",
                reason=f"LoadGen's {self.kind.name} does not serve generated tokens here: "
                f"generate runs under {' or '.join(TOKEN_KINDS)}",
            )
        if cell.batch_size != 1:
            return RepetitionResult(
                status="unsupported",
                reason=f"a LoadGen sample is one sequence (batch 1), not a batch of "
                f"{cell.batch_size}: LoadGen's arrivals set how many are served at once",
            )
        return None


def _calibrate(bench: Bench, generator: Generator, prompt: np.ndarray) -> list[TokenTiming]:
    """Step 2: back-to-back generations of the verified prompt, for CALIBRATION_S and at
    least CALIBRATION_MIN_STEPS of them (timed as the repetition's warmup)."""
    prompt_len, new_tokens = bench.cell.sizes["prompt_len"], bench.cell.sizes["new_tokens"]
    t0 = time.perf_counter()
    timings = []
    while time.perf_counter() - t0 < CALIBRATION_S or len(timings) < CALIBRATION_MIN_STEPS:
        timings.append(token_timing(generator.generate(prompt, new_tokens), prompt_len))
    bench.phases.warmup_s = time.perf_counter() - t0
    return timings
