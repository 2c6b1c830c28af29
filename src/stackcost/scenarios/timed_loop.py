"""stackcost's own scenario: the backend's step under the protocol's timed loop.

The backend runs the repetition (`run_repetition`: in this process, `prepare` then the
protocol's cold call, warmup and timed loop; or a C++ program doing the same), and this
module verifies its output against eager's reference, checks memory growth, and with
--profile adds where the time went, the work done, utilization and energy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from stackcost.axes import QUANTIZED
from stackcost.scenarios.base import Bench, Scenario, wrong
from stackcost.scenarios.settings import TIMED_LOOP

if TYPE_CHECKING:
    from collections.abc import Callable

    from stackcost.backends.base import Backend, Run
    from stackcost.cell import Cell
    from stackcost.measure.copies import HostCopies
    from stackcost.measure.flops import Work
    from stackcost.measure.protocol import Measurement, Protocol
    from stackcost.profile.breakdown import Breakdown
    from stackcost.result import RepetitionResult, Status
    from stackcost.scenarios.subject import Subject
    from stackcost.scenarios.task import RepetitionTask


class TimedLoop(Scenario):
    name = TIMED_LOOP

    def run(self, bench: Bench) -> RepetitionResult:
        from stackcost.backends.base import Unsupported
        from stackcost.measure.disturbance import assess
        from stackcost.measure.leak import check_leak
        from stackcost.result import RepetitionResult
        from stackcost.scenarios import profiling
        from stackcost.scenarios.subject import Subject
        from stackcost.verify import verify

        task, cell = bench.task, bench.cell
        subject = Subject.build(bench)
        thread_env = bench.thread_env()
        with profiling.sampling(task) as sampler:
            try:
                run = _run_repetition(bench, subject)
            except Unsupported as exc:  # found out only once the inputs were known
                return RepetitionResult(status="unsupported", reason=str(exc))
            bench.phases.prepare_s = run.prepare_s
            memory = run.memory if run.memory is not None else subject.memory.read()
            if sampler is not None:
                sampler.mark("timed_end")
        m = run.measurement
        disturbance = assess(m.window) if m.window is not None else None
        details = _details(run, subject, thread_env)
        telemetry = energy = None
        notes: list[str] = []
        if sampler is not None:
            telemetry, energy, notes = profiling.telemetry(sampler, m, cell)
        verification = verify(
            m.output, subject.reference, task.tolerance, QUANTIZED.get(cell.precision)
        )
        m.output = None  # the outputs are verified: free them before any profiled pass
        bench.phases.warmup_s, bench.phases.timed_s = m.warmup_s, m.timed_s
        assert m.stats is not None
        work = achieved_gflops = breakdown = host_copies = None
        if task.profile:
            work, achieved_gflops, breakdown, host_copies, more = _profiled(bench, subject, run)
            notes += more
        status, reason = _verdict(m, wrong(verification, task.tolerance), task.protocol)
        return RepetitionResult(
            status=status,
            reason=reason,
            cold_start_ms=m.cold_ns / 1e6,
            warmup_iters=m.warmup_iters,
            warmup_settled=m.warmup_settled,
            stop_reason=m.stop_reason,
            stats=m.stats,
            throughput=cell.batch_size / (m.stats.median_ms / 1e3),
            samples_ns=m.samples_ns,
            memory=memory,
            verification=verification,
            details=details,
            rss_trace_bytes=m.rss_trace_bytes,
            rss_trace_iters=m.rss_trace_iters,
            leak=check_leak(m.rss_trace_iters, m.rss_trace_bytes),
            breakdown=breakdown,
            work=work,
            achieved_gflops=achieved_gflops,
            telemetry=telemetry,
            energy=energy,
            profile_notes=notes,
            host_copies=host_copies,
            disturbance=disturbance,
        )


def _run_repetition(bench: Bench, subject: Subject) -> Run:
    """The backend's repetition: in this process (prepare + the timed loop) or in a C++
    program, or paced by the parent in bursts (ab). Raises Unsupported."""
    from stackcost.scenarios import profiling

    task, cell, backend = bench.task, bench.cell, bench.backend
    if task.paced_fd is not None:
        return _paced(backend, subject, cell, task, bench.rebind)
    bench.rebind()
    return backend.run_repetition(
        subject.model,
        subject.example,
        cell,
        subject.ctx,
        task.protocol,
        task.timeout_s,
        profile_iters=profiling.PROFILE_ITERS if task.profile else 0,
    )


def _details(run: Run, subject: Subject, thread_env: dict[str, str | None]) -> dict[str, Any]:
    """The repetition's details: the backend's own, the threads' environment, where the
    reference came from, the inputs, and the page faults per step where counted; for a step
    run in this process, its memory on transparent huge pages (the `huge` allocator's)."""
    from stackcost.measure.memory import anon_huge_bytes

    m = run.measurement
    details = {
        **run.details,
        "thread_env": thread_env,
        "reference": subject.reference_from,
        "inputs": subject.example.record(),
    }
    if m.page_faults_per_step is not None:
        details["page_faults_per_step"] = round(m.page_faults_per_step, 1)
    if run.memory is None and (huge := anon_huge_bytes()) is not None:
        details["anon_huge_pages_mib"] = round(huge / 2**20, 1)
    return details


def _profiled(
    bench: Bench, subject: Subject, run: Run
) -> tuple[Work, float | None, Breakdown | None, HostCopies | None, list[str]]:
    """--profile's additions, after the timed loop: the work done and the FLOP/s achieved,
    where the time went (a profiled pass, with its notes), and on CUDA the cost of copying
    the inputs from the host."""
    from stackcost.scenarios import profiling

    cell, m = bench.cell, run.measurement
    assert m.stats is not None
    work, achieved_gflops = profiling.work(subject.model, subject.example, cell, m.stats)
    breakdown, notes = profiling.breakdown(bench.backend, run, cell)
    host_copies = None
    if cell.device == "cuda":
        from stackcost.measure.copies import host_to_device

        host_copies = host_to_device(subject.example.tensors)
    return work, achieved_gflops, breakdown, host_copies, notes


def _paced(
    backend: Backend, subject: Subject, cell: Cell, task: RepetitionTask, rebind: Callable[[], None]
) -> Run:
    """`run_repetition` with the timed loop paced by the parent in bursts (ab's burst
    design, measure/bursts.py). A backend that runs the whole repetition in its own program
    cannot be cut into bursts: it says so on the reply channel, and the parent measures the
    cell in whole-process blocks instead."""
    import dataclasses
    import json
    import os
    import sys
    import time

    import torch

    from stackcost.backends.base import Backend, Run, Unsupported
    from stackcost.measure.bursts import paced_loop
    from stackcost.measure.protocol import cold_call, warm_up
    from stackcost.measure.timer import timer_for

    assert task.paced_fd is not None
    with os.fdopen(task.paced_fd, "w") as replies:
        if type(backend).run_repetition is not Backend.run_repetition:
            why = f"{backend.name} runs a whole repetition in its own program"
            replies.write(json.dumps({"refused": why}) + "\n")
            raise Unsupported(f"cannot be paced in bursts: {why}")
        t = time.perf_counter()
        ctx = dataclasses.replace(subject.ctx, paced=True)
        prepared = backend.prepare(subject.model, subject.example, cell, ctx)
        prepare_s = time.perf_counter() - t
        prepared_on = sorted(os.sched_getaffinity(0))
        rebind()  # the cold call, warmup and bursts on the cores the threads are bound to
        timer = timer_for(cell.device)
        m = cold_call(prepared.step, timer, prepared.keep)
        warm_up(prepared.step, timer, task.protocol, m)
        bursts = paced_loop(prepared.step, timer, m, sys.stdin, replies, task.protocol.confidence)
    details = {
        **prepared.details,
        "paced": bursts,
        # The main thread's cores (Bench.rebind): spread to prepare, bound to be timed.
        "main_thread_cpus": {"prepare": prepared_on, "timed": sorted(os.sched_getaffinity(0))},
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
    }
    return Run(m, prepare_s, details, prepared=prepared)


# The longest --max-time a capped repetition suggests; beyond it, more repetitions.
MAX_SUGGESTED_S = 600


def _verdict(m: Measurement, wrong_output: str | None, protocol: Protocol) -> tuple[Status, str]:
    """wrong (the output), unstable (the stop rule was not met), or ok. A repetition stopped
    by the time cap says what would reach the target: the CI of a median narrows as
    1/sqrt(n), so ±c% after t s needs about t * (c / target)^2 s at the same pace."""
    if wrong_output is not None:
        return "wrong", wrong_output
    if not m.unstable:
        return "ok", ""
    reason = (
        f"stopped by {m.stop_reason}"
        if m.warmup_settled
        else f"warmup did not settle in {protocol.warmup_max_time_s:g} s"
    )
    if m.stop_reason != "converged" and m.stats is not None and m.stats.n:
        ci = m.stats.ci_half_width_rel
        reason += f" after {m.stats.n} iterations; CI of median +/-{ci:.1%}"
        if m.stop_reason == "time cap" and m.warmup_settled and math.isfinite(ci) and ci > 0:
            needed = math.ceil(m.timed_s * (ci / protocol.target_ci) ** 2)
            if needed <= MAX_SUGGESTED_S:
                reason += (
                    f"; +/-{protocol.target_ci:.0%} would take about {needed} s at this pace "
                    f"(estimated: --max-time {needed}), or judge it by repetitions "
                    "(--repeats 3)"
                )
            else:  # a loop this noisy is not fixed by time: the estimate would be absurd
                reason += (
                    f"; +/-{protocol.target_ci:.0%} is out of reach by time alone (over "
                    f"{MAX_SUGGESTED_S // 60} min at this pace): judge it by repetitions "
                    "(--repeats 3)"
                )
    return "unstable", reason
