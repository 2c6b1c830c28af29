"""One scenario repetition inside the worker: prepare the instances, warm and calibrate
them, then hand them to LoadGen.

The timed loop's own cold call and warmup (stackcost.measure.protocol) warm each
instance, so a scenario starts from the same settled state the timed loop measures in;
the calibration (the warm step's median) only tells LoadGen what to expect.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import Backend, PrepareContext, Prepared
    from stackcost.cell import Cell
    from stackcost.measure.counters import Window
    from stackcost.measure.protocol import Protocol
    from stackcost.scenarios.summary import ScenarioResult
    from stackcost.workload import Example

# Seconds of back-to-back warm steps whose median is LoadGen's expected latency.
CALIBRATION_S = 0.2
CALIBRATION_MIN_STEPS = 5


@dataclass
class Driven:
    """What a scenario repetition hands back to the worker."""

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
        m = cold_call(p.step, timer)
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
