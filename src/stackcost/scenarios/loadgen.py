"""MLPerf LoadGen's scenarios (one LoadGen instance of this class per entry of
settings.KINDS): prepare the backend's instances, warm and calibrate them, hand them to
LoadGen, and verify their outputs against eager's reference like the timed loop's.

The timed loop's own cold call and warmup (stackcost.measure.protocol) warm each
instance, so a scenario starts from the same settled state the timed loop measures in;
the calibration (the warm step's median) only tells LoadGen what to expect. LoadGen's
INVALID verdict makes the repetition `unstable` (measured and verified, its requirements
unmet).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stackcost.axes import QUANTIZED
from stackcost.scenarios.base import Bench, Scenario, wrong
from stackcost.scenarios.settings import LoadGenKind

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import Backend, PrepareContext, Prepared
    from stackcost.cell import Cell
    from stackcost.measure.counters import Window
    from stackcost.measure.protocol import Protocol
    from stackcost.result import RepetitionResult, ScenarioResult, Status
    from stackcost.workload import Example

# Seconds of back-to-back warm steps whose median is LoadGen's expected latency.
CALIBRATION_S = 0.2
CALIBRATION_MIN_STEPS = 5


class LoadGen(Scenario):
    """One of LoadGen's scenarios over the backend's parallel instances."""

    def __init__(self, kind: LoadGenKind) -> None:
        self.name = kind.name  # what LoadGen is asked follows from the cell's config

    def run(self, bench: Bench) -> RepetitionResult:
        import torch

        from stackcost.measure.disturbance import assess
        from stackcost.result import RepetitionResult
        from stackcost.scenarios.subject import Subject
        from stackcost.verify import verify

        task, cell = bench.task, bench.cell
        subject = Subject.build(bench)
        thread_env = bench.thread_env()
        try:
            run = drive(
                bench.backend, subject.model, subject.example, cell, subject.ctx, task.protocol
            )
        except NotImplementedError as exc:  # the step runs in another program (native rungs)
            return RepetitionResult(
                status="unsupported", reason=f"LoadGen scenarios drive an in-process step; {exc}"
            )
        phases = bench.phases
        phases.prepare_s, phases.warmup_s = run.prepare_s, run.warmup_s
        if run.window is not None:  # the LoadGen test, peak search included
            phases.timed_s = (run.window.end_ns - run.window.start_ns) / 1e9
        s = run.result
        rule = QUANTIZED.get(cell.precision)
        checks = [verify(out, subject.reference, task.tolerance, rule) for out in run.outputs]
        verification = next((v for v in checks if not v.ok), checks[0])
        status, reason = _verdict(s, wrong(verification, task.tolerance))
        return RepetitionResult(
            status=status,
            reason=reason,
            cold_start_ms=run.cold_ns / 1e6,
            warmup_iters=run.warmup_iters,
            warmup_settled=run.warmup_settled,
            # LoadGen samples are batches: inputs/s, as the timed loop's
            throughput=s.rate * cell.batch_size if s.rate is not None else None,
            memory=subject.memory.read(),
            verification=verification,
            details={
                **run.details,
                "instances": len(run.prepared),
                "torch_threads": torch.get_num_threads(),
                "thread_env": thread_env,
                "inputs": subject.example.record(),
            },
            disturbance=assess(run.window) if run.window is not None else None,
            scenario=s,
        )


def _verdict(s: ScenarioResult, wrong_output: str | None) -> tuple[Status, str]:
    """wrong (the outputs), unstable (LoadGen's INVALID, or no headline), or ok."""
    if wrong_output is not None:
        return "wrong", wrong_output
    if s.verdict != "VALID" or s.value is None:
        return "unstable", "; ".join([s.why_invalid() or "LoadGen INVALID", *s.notes[-1:]])
    return "ok", ""


@dataclass
class Driven:
    """What `drive` hands back to the scenario."""

    result: ScenarioResult
    prepare_s: float  # all instances
    cold_ns: int  # the first instance's first call
    outputs: list[Any]  # each instance's first output, to verify against eager's
    details: dict[str, Any]  # the first instance's prepare details, recorded
    warmup_s: float
    warmup_iters: int
    warmup_settled: bool
    window: Window | None = None  # the LoadGen test's edges, for the disturbance check
    prepared: list[Prepared] = field(default_factory=list)


def synchronized(step: Any, device: str) -> Any:
    """A step that returns only once the device is done: LoadGen's clock sees the work."""
    if device != "cuda":
        return step
    import torch

    def done() -> Any:
        out = step()
        torch.cuda.synchronize()
        return out

    return done


def drive(
    backend: Backend,
    model: torch.nn.Module,
    example: Example,
    cell: Cell,
    ctx: PrepareContext,
    protocol: Protocol,
) -> Driven:
    """Prepare `cell.scenario.instances` steps, warm each, calibrate, run LoadGen."""
    from stackcost.measure.counters import Edge, Window
    from stackcost.measure.protocol import cold_call, warm_up
    from stackcost.measure.timer import timer_for
    from stackcost.scenarios.sut import run_scenario

    config = cell.scenario
    assert config is not None
    t = time.perf_counter()
    prepared = backend.prepare_instances(model, example, cell, ctx, config.instances)
    prepare_s = time.perf_counter() - t
    timer = timer_for(cell.device)
    outputs, warm, iters, settled, cold_ns = [], 0.0, 0, True, 0
    for i, p in enumerate(prepared):
        m = cold_call(p.step, timer, p.keep)
        warm_up(p.step, timer, protocol, m)
        outputs.append(m.output)
        cold_ns = m.cold_ns if i == 0 else cold_ns
        warm, iters = warm + m.warmup_s, iters + m.warmup_iters
        settled = settled and m.warmup_settled
    samples: list[int] = []
    start = time.perf_counter()
    while time.perf_counter() - start < CALIBRATION_S or len(samples) < CALIBRATION_MIN_STEPS:
        timer.run(prepared[0].step, 1, samples)
    steps = [synchronized(p.step, cell.device) for p in prepared]
    first = Edge.now()
    result = run_scenario(
        config, steps, statistics.median(samples), ctx.workdir / "loadgen" / config.name
    )
    return Driven(
        result=result,
        prepare_s=prepare_s,
        cold_ns=cold_ns,
        outputs=outputs,
        details=dict(prepared[0].details),
        warmup_s=warm,
        warmup_iters=iters,
        warmup_settled=settled,
        window=Window.between(first, Edge.now()),
        prepared=prepared,
    )
