"""Token generation: prefill and decode with a KV cache, through the rung's own generation
API (stackcost.generation, one module per runtime).

One repetition:
1. builds the decoder (seeded random weights) and a fixed prompt drawn from the seed;
2. takes eager fp32's reference: its greedy continuation of the prompt (S verified steps)
   and its logits over prompt + continuation from one full forward, no cache;
3. prepares the rung's generator (export, convert, quantize), and verifies it by teacher
   forcing: the rung's logits for the same fixed sequence, prefill then cached decode
   steps, against the reference, within the precision's tolerance. A rung outside it is
   `wrong`. Its greedy tokens against eager's are recorded, as information only;
4. runs a cold generation (compile included), then timed generations: at least
   MIN_GENERATIONS, more while the protocol's min_time_s lasts, none started past its
   max_time_s. Under `ab`'s burst design the parent paces them instead: bursts of whole
   generations, alternated with the other side's worker (paced_generations);
5. turns the clock readings into TTFT, TPOT and tokens/s (generation/metrics.py), and the
   decode's bytes per step into achieved bandwidth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.axes import QUANTIZED
from stackcost.cell import GENERATE
from stackcost.scenarios.base import Bench, Scenario, wrong

if TYPE_CHECKING:
    import numpy as np

    from stackcost.cell import Cell
    from stackcost.generation.base import Generation, Generator
    from stackcost.generation.metrics import TokenTiming
    from stackcost.measure.protocol import Protocol
    from stackcost.result import GenerationResult, RepetitionResult
    from stackcost.scenarios.base import MemoryWatch
    from stackcost.verify import Verification
    from stackcost.workload import Workload

MIN_GENERATIONS = 3
VERIFIED_STEPS = 8  # decode steps checked by teacher forcing (and greedy agreement)
PROMPT_SEED_OFFSET = 7919  # the prompt's ids come from the model seed plus this


def prompt_ids(vocab: int, batch: int, prompt_len: int, seed: int) -> np.ndarray:
    """The fixed prompt: ids uniform in the vocabulary, from the model's seed."""
    import numpy as np

    rng = np.random.default_rng(seed + PROMPT_SEED_OFFSET)
    return rng.integers(0, vocab, (batch, prompt_len), dtype=np.int64)


def moe_reason(workload: Workload) -> str | None:
    """Why a mixture-of-experts decoder is refused: a random router makes routing
    meaningless. Read from the workload (its config), so no weights are built to say it."""
    if workload.experts is None:
        return None
    return (
        f"{workload.name} is a mixture of experts ({workload.experts}): with random weights "
        "its router's choices are meaningless, so generate measures dense models only"
    )


def reference(model: Any, prompt: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Eager fp32's greedy continuation (steps tokens per row, DynamicCache) and its logits
    at positions prompt_len-1 .. prompt_len+steps-1 of prompt + continuation, from one full
    forward without a cache."""
    import torch

    from stackcost.generation.eager import greedy_config

    ids = torch.from_numpy(prompt)
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), generation_config=greedy_config(model, steps)
        )
        logits = model(out, use_cache=False, logits_to_keep=steps + 1).logits
    return out[:, prompt.shape[1] :].numpy(), logits.float().numpy()


def agreement(tokens: np.ndarray, expected: np.ndarray) -> tuple[float, int]:
    """Fraction of equal tokens over the compared steps, and the shortest matching prefix."""
    import numpy as np

    steps = min(tokens.shape[1], expected.shape[1])
    same = tokens[:, :steps] == expected[:, :steps]
    prefix = min(int(np.argmin(row)) if not row.all() else steps for row in same)
    return float(same.mean()), prefix


@dataclass
class Verified:
    """Generators prepared from the cell's decoder and checked against eager fp32."""

    generators: list[Generator]  # one per instance, each prepared, warmed and verified
    prompt: np.ndarray  # (rows, prompt_len): the fixed prompt they were verified on
    cold: Generation  # the first generator's first generation (compile included)
    verification: Verification  # the first that failed, else the first generator's
    token_agreement: float  # the cold generation's greedy tokens against eager's
    agreeing_prefix: int
    memory: MemoryWatch  # reset before the generators were prepared


def verified_generators(bench: Bench, rows: int, count: int = 1) -> Verified | RepetitionResult:
    """Steps 1-3 of a repetition (the module's docstring), for `count` generators over a
    prompt of `rows` rows: the generators, or the repetition's answer when the cell cannot
    run (not a decoder, a mixture of experts, its runtime missing, sizes refused)."""
    from stackcost import zoo
    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.backends.base import Unsupported
    from stackcost.generation.base import Decoder
    from stackcost.result import RepetitionResult

    task, cell, backend, phases = bench.task, bench.cell, bench.backend, bench.phases
    workload = zoo.workload_of(cell.model)
    if (refused := _not_generated(workload, cell)) is not None:
        return refused
    prompt_len, new_tokens = cell.sizes["prompt_len"], cell.sizes["new_tokens"]
    t = time.perf_counter()
    model = bench.build_model(workload)
    phases.build_s = time.perf_counter() - t

    t = time.perf_counter()
    prompt = prompt_ids(model.config.vocab_size, rows, prompt_len, cell.model.seed)
    steps = min(VERIFIED_STEPS, new_tokens)
    expected, ref_logits = reference(model, prompt, steps)
    phases.reference_s = time.perf_counter() - t

    memory = bench.watch_memory()
    cache = ArtifactCache(Path(task.cache_dir)) if task.cache_dir else None
    generator_class = backend.generator_class()
    if generator_class is None:  # the parent refuses it first; a direct task may not
        return RepetitionResult(status="unsupported", reason=f"{backend.name} does not generate")
    if (missing := generator_class.missing()) is not None:
        return RepetitionResult(status="unavailable", reason=missing)
    workdir, digest = Path(task.workdir), bench.progress.weights_digest or ""
    # A decoder each: a generator may replace its model (eager's quantized copy), and each
    # instance has a workdir of its own, as backends' instances do.
    generators = [
        generator_class(
            Decoder(model, cell, workdir / f"instance-{i}" if i else workdir, cache, digest)
        )
        for i in range(count)
    ]
    try:
        checks, colds = _prepare_and_verify(bench, generators, prompt, expected, ref_logits)
    except Unsupported as exc:  # found out only once the sizes were known
        return RepetitionResult(status="unsupported", reason=str(exc))
    token_agreement, prefix = agreement(colds[0].tokens, expected)
    return Verified(
        generators=generators,
        prompt=prompt,
        cold=colds[0],
        verification=next((v for v in checks if not v.ok), checks[0]),
        token_agreement=token_agreement,
        agreeing_prefix=prefix,
        memory=memory,
    )


def _not_generated(workload: Workload, cell: Cell) -> RepetitionResult | None:
    """Why the cell's model is not generated from, before anything is built: not a
    decoder with its LM head, or a mixture of experts; None when it is."""
    from stackcost.result import RepetitionResult

    if workload.domain != "generation":
        return RepetitionResult(
            status="unsupported",
            reason=f"{cell.model.name} is not a decoder with its LM head: generate runs "
            "llama-tiny, llama-150m, llama-1b, or hf:TYPE --head causal-lm",
        )
    # Before the build: a mixture of experts' weights alone may not fit (hf:mixtral).
    if (moe := moe_reason(workload)) is not None:
        return RepetitionResult(status="unsupported", reason=moe)
    return None


def _prepare_and_verify(
    bench: Bench,
    generators: list[Generator],
    prompt: np.ndarray,
    expected: np.ndarray,
    ref_logits: np.ndarray,
) -> tuple[list[Verification], list[Generation]]:
    """Step 3 for each generator: prepare it (timed into phases.prepare_s), run its cold
    generation, and check its teacher-forced logits against eager's. Raises Unsupported
    when the runtime refuses the sizes."""
    import numpy as np

    from stackcost.verify import verify

    task, cell, phases = bench.task, bench.cell, bench.phases
    prompt_len, new_tokens = cell.sizes["prompt_len"], cell.sizes["new_tokens"]
    names = ("prefill logits", "decode logits")
    teacher = np.concatenate([prompt, expected], axis=1)
    checks, colds, phases.prepare_s = [], [], 0.0
    for generator in generators:
        t = time.perf_counter()
        generator.prepare()
        phases.prepare_s += time.perf_counter() - t
        # The first generation first: whatever compiles on first use is its cold start.
        colds.append(generator.generate(prompt, new_tokens))
        forced = generator.teacher_forced(teacher, prompt_len)
        checks.append(
            verify(
                {names[0]: forced[:, :1], names[1]: forced[:, 1:]},
                [(names[0], ref_logits[:, :1]), (names[1], ref_logits[:, 1:])],
                task.tolerance,
                QUANTIZED.get(cell.precision),
            )
        )
    return checks, colds


def token_timing(generation: Generation, prompt_len: int) -> TokenTiming:
    """A generation's clock readings as generation/metrics.py reads them."""
    from stackcost.generation.metrics import TokenTiming

    return TokenTiming(
        batch=generation.tokens.shape[0],
        prompt_len=prompt_len,
        start_ns=generation.start_ns,
        token_ns=generation.token_ns,
    )


class Generate(Scenario):
    name = GENERATE

    def run(self, bench: Bench) -> RepetitionResult:
        from stackcost.measure.bursts import STOP_REASON
        from stackcost.measure.stats import summarize
        from stackcost.result import RepetitionResult

        task, cell, phases = bench.task, bench.cell, bench.phases
        ready = verified_generators(bench, cell.batch_size)
        if isinstance(ready, RepetitionResult):
            return ready
        generator, prompt, verification = ready.generators[0], ready.prompt, ready.verification
        prompt_len, new_tokens = cell.sizes["prompt_len"], cell.sizes["new_tokens"]

        t0 = time.perf_counter()
        paced = None
        if task.paced_fd is not None:
            bench.rebind()  # the generations on the cores the threads are bound to
            timings, paced = paced_generations(generator, prompt, new_tokens, task.paced_fd)
        else:
            timings = timed_generations(generator, prompt, new_tokens, task.protocol)
        phases.timed_s = time.perf_counter() - t0
        # Before token_numbers: sizing the embedding table reads the rung's graph (OpenVINO:
        # +2 MB of peak RSS on a 320 MB model), which is not the generations' memory.
        memory = ready.memory.read()
        cold_timing = token_timing(ready.cold, prompt_len)
        result = token_numbers(
            generator, cell, timings, cold_timing, ready.token_agreement, ready.agreeing_prefix
        )
        steps_ns = [s for g in timings for s in g.decode_steps_ns]
        bad = wrong(verification, task.tolerance)
        return RepetitionResult(
            status="wrong" if bad else "ok",
            reason=bad or "",
            cold_start_ms=cold_timing.e2e_ns / 1e6,
            stop_reason=STOP_REASON if paced is not None else None,
            stats=summarize(steps_ns) if steps_ns else summarize([g.ttft_ns for g in timings]),
            throughput=result.decode_tokens_per_s,
            samples_ns=steps_ns,
            memory=memory,
            verification=verification,
            generation=result,
            details={
                **generator.details,
                "generator": generator.details.get("generator", generator.api),
                "thread_env": bench.thread_env(),
                "prompt": f"{cell.batch_size} x {prompt_len} ids from seed {cell.model.seed}",
                **({"paced": paced} if paced is not None else {}),
            },
        )


def timed_generations(
    generator: Generator, prompt: np.ndarray, new_tokens: int, protocol: Protocol
) -> list[TokenTiming]:
    """Step 4's timed generations: at least MIN_GENERATIONS, more while min_time_s lasts,
    none started past max_time_s."""
    timings, t0 = [], time.perf_counter()
    while True:
        timings.append(token_timing(generator.generate(prompt, new_tokens), prompt.shape[1]))
        elapsed = time.perf_counter() - t0
        if len(timings) >= MIN_GENERATIONS and elapsed >= protocol.min_time_s:
            break
        if elapsed >= protocol.max_time_s:
            break
    return timings


def paced_generations(
    generator: Generator, prompt: np.ndarray, new_tokens: int, paced_fd: int
) -> tuple[list[TokenTiming], dict[str, Any]]:
    """Step 4 paced by `ab`'s parent in bursts of whole generations (measure/bursts.py):
    one warm generation says how long a generation takes, then each burst of N
    generations answers their end-to-end times, TTFTs and decode steps, so the parent
    judges TTFT and TPOT pair by pair. Returns the bursts' generations (the warm one when
    no burst came) and the bursts' summary.

    A burst has no untimed wake-up, unlike the timed loop's (WAKE_STEPS): it would cost a
    whole generation, and a shorter one would compile another static cache. So a burst's
    TTFT includes waking threads that slept while the other side ran, on both sides alike:
    it cancels in the ratio the verdict is read from, not in the absolute TTFT."""
    import os
    import sys

    from stackcost.measure.bursts import TPOT_NS, TTFT_NS, serve_bursts

    prompt_len = prompt.shape[1]
    warm = token_timing(generator.generate(prompt, new_tokens), prompt_len)
    timings: list[TokenTiming] = []

    def burst(n: int) -> dict[str, Any]:
        mine = [token_timing(generator.generate(prompt, new_tokens), prompt_len) for _ in range(n)]
        timings.extend(mine)
        return {
            "ns": [g.e2e_ns for g in mine],
            TTFT_NS: [g.ttft_ns for g in mine],
            TPOT_NS: [s for g in mine for s in g.decode_steps_ns],
        }

    with os.fdopen(paced_fd, "w") as replies:
        summary = serve_bursts(burst, warm.e2e_ns, sys.stdin, replies)
    return timings or [warm], summary


def token_numbers(
    generator: Generator,
    cell: Cell,
    timings: list[TokenTiming],
    cold: TokenTiming,
    token_agreement: float,
    prefix: int,
) -> GenerationResult:
    """The GenerationResult of timed generations (TokenTimings) of `cell`'s sizes."""
    import numpy as np

    from stackcost.generation.metrics import DEFINITION, bytes_per_decode_step, kv_cache_bytes
    from stackcost.result import GenerationResult

    config = generator.decoder.config
    batch, prompt_len, new_tokens = (
        cell.batch_size,
        cell.sizes["prompt_len"],
        cell.sizes["new_tokens"],
    )
    steps = np.asarray([s for g in timings for s in g.decode_steps_ns], dtype=np.float64) / 1e6
    decode = [r for g in timings if (r := g.decode_tokens_per_s) is not None]
    tpot = {q: float(np.percentile(steps, q)) if steps.size else None for q in (50, 90, 99)}
    per_element = generator.kv_bytes_per_element
    weights, gathered = generator.weight_bytes(), generator.gathered_bytes()
    per_step = bytes_per_decode_step(
        weights, config, batch, prompt_len, new_tokens, per_element, gathered
    )
    return GenerationResult(
        batch=batch,
        prompt_len=prompt_len,
        new_tokens=new_tokens,
        generations=len(timings),
        ttft_ms=float(np.median([g.ttft_ns for g in timings])) / 1e6,
        tpot_p50_ms=tpot[50],
        tpot_p90_ms=tpot[90],
        tpot_p99_ms=tpot[99],
        prefill_tokens_per_s=float(np.median([g.prefill_tokens_per_s for g in timings])),
        decode_tokens_per_s=float(np.median(decode)) if decode else None,
        output_tokens_per_s=float(np.median([g.output_tokens_per_s for g in timings])),
        e2e_ms=float(np.median([g.e2e_ns for g in timings])) / 1e6,
        cold_ms=cold.e2e_ns / 1e6,
        kv_cache_bytes=kv_cache_bytes(config, batch, prompt_len + new_tokens, per_element),
        kv_bytes_per_element=per_element,
        weight_bytes=weights,
        gathered_bytes=gathered,
        bytes_per_step=per_step,
        achieved_gbs=per_step / (tpot[50] / 1e3) / 1e9 if tpot[50] else None,
        api=generator.api,
        timing=generator.timing,
        token_agreement=token_agreement,
        agreeing_prefix=prefix,
        definition=DEFINITION,
    )
