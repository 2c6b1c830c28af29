"""The worker: one repetition of one cell, in its own process.

Usage (by executors only): python -m stackcost.execute.worker TASK.json RESULT.json
Thread variables are set by the parent in this process's environment, so they are in
place before torch, ONNX Runtime or OpenVINO is imported.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from stackcost.execute import profiling
from stackcost.execute.process import guarded, serve
from stackcost.execute.task import RepetitionTask
from stackcost.result import Memory, Phases, RepetitionResult


def run_task(task: RepetitionTask) -> RepetitionResult:
    return guarded(task, _measure)


def _measure(
    task: RepetitionTask, result: RepetitionResult, phases: Phases, t_start: float
) -> None:
    import torch

    from stackcost import zoo
    from stackcost.backends import PrepareContext, load_backend
    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.backends.base import Unsupported
    from stackcost.measure import memory
    from stackcost.measure.disturbance import assess
    from stackcost.measure.leak import check_leak
    from stackcost.verify import verify, worst_output
    from stackcost.workload import make_example

    cell = task.cell
    torch.set_num_threads(cell.threads)
    backend = load_backend(cell.backend)
    phases.import_s = time.perf_counter() - t_start
    problem = backend.why_not(cell)
    if problem is not None:  # decided before any model is built
        result.status, result.reason = "unsupported", problem
        return
    baseline = memory.rss_bytes()

    t = time.perf_counter()
    workload = zoo.workload_of(cell.model)
    model = zoo.build_model(cell.model, cell.sizes, workload)
    result.weights_digest = zoo.weights_digest(model)
    example = make_example(workload, cell.model, cell.batch_size, cell.sizes)
    phases.build_s = time.perf_counter() - t

    # The eager fp32 reference, computed here on the same weights and inputs.
    cache = ArtifactCache(Path(task.cache_dir)) if task.cache_dir else None
    t = time.perf_counter()
    reference, reference_from = _reference(model, example, cell, cache, result.weights_digest)
    phases.reference_s = time.perf_counter() - t

    device = torch.device(cell.device)
    model, example = model.to(device), example.to(device)
    if cell.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    can_reset = memory.reset_peak()  # the reference forward is not the backend's memory

    ctx = PrepareContext(
        workdir=Path(task.workdir),
        cache=cache,
        weights_digest=result.weights_digest or "",
    )
    thread_env = {k: os.environ.get(k) for k in task.thread_env()}
    if cell.scenario is not None:  # a LoadGen deployment scenario instead of the timed loop
        _scenario(task, backend, model, example, reference, ctx, result, phases, thread_env)
        if result.status != "unsupported":
            result.memory = _memory(baseline, can_reset, cell.device)
        return
    with profiling.sampling(task) as sampler:
        # In this process (prepare + the timed loop) or in a C++ program: the backend's.
        try:
            run = backend.run_repetition(
                model,
                example,
                cell,
                ctx,
                task.protocol,
                task.timeout_s,
                profile_iters=profiling.PROFILE_ITERS if task.profile else 0,
            )
        except Unsupported as exc:  # found out only once the inputs were known
            result.status, result.reason = "unsupported", str(exc)
            return
        m = run.measurement
        phases.prepare_s = run.prepare_s
        result.details = {**run.details, "thread_env": thread_env, "reference": reference_from}
        result.memory = (
            run.memory if run.memory is not None else _memory(baseline, can_reset, cell.device)
        )
        if sampler is not None:
            sampler.mark("timed_end")
    if m.window is not None:
        result.disturbance = assess(m.window)
    result.details["inputs"] = example.record()
    if sampler is not None:
        profiling.record_telemetry(sampler, m, cell, result)
    result.verification = verify(m.output, reference, task.tolerance)
    del m.output
    phases.warmup_s, phases.timed_s = m.warmup_s, m.timed_s
    result.cold_start_ms = m.cold_ns / 1e6
    result.warmup_iters, result.warmup_settled = m.warmup_iters, m.warmup_settled
    result.stop_reason = m.stop_reason
    result.stats = m.stats
    result.samples_ns = m.samples_ns
    result.rss_trace_bytes, result.rss_trace_iters = m.rss_trace_bytes, m.rss_trace_iters
    result.leak = check_leak(m.rss_trace_iters, m.rss_trace_bytes)
    assert m.stats is not None
    result.throughput = cell.batch_size / (m.stats.median_ms / 1e3)
    if task.profile:
        profiling.record_work(model, example, cell, result)
        profiling.breakdown(backend, run, cell, result)
    if not result.verification.ok:
        result.status = "wrong"
        v = result.verification
        result.reason = v.detail or (
            f"max relative error {v.max_rel_err:.3g} > tolerance {task.tolerance:.3g}"
            + worst_output(v)
        )
    elif m.unstable:
        result.status = "unstable"
        result.reason = (
            f"stopped by {m.stop_reason}"
            if m.warmup_settled
            else f"warmup did not settle in {task.protocol.warmup_max_time_s:g} s"
        )
        if m.stop_reason != "converged" and m.stats.n:
            result.reason += f"; CI of median +/-{m.stats.ci_half_width_rel:.1%}"
    else:
        result.status = "ok"


def _scenario(
    task: RepetitionTask,
    backend: Any,
    model: Any,
    example: Any,
    reference: Any,
    ctx: Any,
    result: RepetitionResult,
    phases: Phases,
    thread_env: dict[str, str | None],
) -> None:
    """A scenario cell: the backend's instances under LoadGen (stackcost.scenarios.drive),
    verified against eager's reference like the timed loop; LoadGen's INVALID verdict
    makes the repetition `unstable` (measured and verified, its requirements unmet)."""
    import torch

    from stackcost.measure.disturbance import assess
    from stackcost.scenarios.drive import drive
    from stackcost.verify import verify, worst_output

    cell = task.cell
    assert cell.scenario is not None
    try:
        run = drive(backend, model, example, cell, ctx, task.protocol)
    except NotImplementedError as exc:  # the step runs in another program (native rungs)
        result.status = "unsupported"
        result.reason = f"LoadGen scenarios drive an in-process step; {exc}"
        return
    phases.prepare_s, phases.warmup_s = run.prepare_s, run.warmup_s
    if run.window is not None:  # the LoadGen test, peak search included
        phases.timed_s = (run.window.end_ns - run.window.start_ns) / 1e9
    result.cold_start_ms = run.cold_ns / 1e6
    result.warmup_iters, result.warmup_settled = run.warmup_iters, run.warmup_settled
    result.details = {
        **run.details,
        "instances": len(run.prepared),
        "torch_threads": torch.get_num_threads(),
        "thread_env": thread_env,
        "inputs": example.record(),
    }
    result.scenario = s = run.result
    if s.rate is not None:  # LoadGen samples are batches: inputs/s, as the timed loop's
        result.throughput = s.rate * cell.batch_size
    if run.window is not None:
        result.disturbance = assess(run.window)
    checks = [verify(out, reference, task.tolerance) for out in run.outputs]
    result.verification = next((v for v in checks if not v.ok), checks[0])
    if not result.verification.ok:
        v = result.verification
        result.status = "wrong"
        result.reason = v.detail or (
            f"max relative error {v.max_rel_err:.3g} > tolerance {task.tolerance:.3g}"
            + worst_output(v)
        )
    elif s.verdict != "VALID" or s.value is None:
        result.status = "unstable"
        result.reason = "; ".join([s.why_invalid() or "LoadGen INVALID", *s.notes[-1:]])
    else:
        result.status = "ok"


def _reference(model, example, cell, cache, weights: str | None) -> tuple[list, str]:
    """The eager fp32 reference outputs, and where they came from.

    With the run's artifact cache, the cell's first repetition computes them (one eager
    forward: seconds at batch 64 and 224 px) and saves them; later ones load them. The
    key holds the weights' digest and the inputs' bytes, so a reference is only reused
    for the very weights and inputs it was computed on."""
    import hashlib

    import numpy as np
    import torch

    from stackcost.verify import leaves

    def compute() -> list:
        with torch.inference_mode():
            return leaves(example.call(model))

    if cache is None:
        return compute(), "computed"
    inputs = hashlib.sha1()
    for tensor in example.tensors:
        inputs.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    key = {
        "artifact": "eager-reference",
        "model": cell.model.key_data(),
        "weights": weights,
        "inputs": inputs.hexdigest(),
        "shapes": example.record(),
        "threads": cell.threads,  # a reduction split differently rounds differently
    }
    computed: list = []

    def make(home: Path) -> dict:
        computed.extend(compute())
        np.savez(home / "reference.npz", *[array for _, array in computed])
        return {"names": [name for name, _ in computed]}

    home, record = cache.reuse_or_make(key, make)
    if computed:
        return computed, "computed"
    with np.load(home / "reference.npz") as saved:
        arrays = [saved[f"arr_{i}"] for i in range(len(record["names"]))]
    return list(zip(record["names"], arrays, strict=True)), "reused from an earlier repetition"


def _memory(baseline: int, can_reset: bool, device: str) -> Memory:
    import torch

    from stackcost.measure import memory

    peak = memory.peak_rss_bytes()
    return Memory(
        baseline_rss_bytes=baseline,
        peak_rss_bytes=peak,
        peak_over_baseline_bytes=peak - baseline,
        allocator_peak_bytes=int(torch.cuda.max_memory_allocated()) if device == "cuda" else None,
        method="VmHWM after reset" if can_reset else "ru_maxrss (process lifetime)",
    )


if __name__ == "__main__":
    serve(RepetitionTask, _measure)
