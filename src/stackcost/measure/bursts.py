"""The timed loop paced by a parent in bursts: `ab`'s burst design (execute/paced.py).

On a 2-vCPU VM the noise comes in modes that last seconds (issue 40): two measurements
taken tens of milliseconds apart see the same mode, and it cancels in their ratio. So
the parent holds one warm worker per side and alternates short bursts between them; this
module is the worker's half. After the cold call and the warmup, instead of the stop
rule, the worker serves bursts until the parent says stop.

Protocol, one JSON line each way. The worker writes replies to its reply file (a pipe
the parent passed it) and reads commands on stdin:
- worker: {"ready": STEP_NS} once warm (the median of a few steps). The parent sizes the
  bursts from a first burst of SIZING_STEPS once both sides are ready, not from this: the
  other worker may still have been warming up beside it (execute/interleave.burst_steps);
- parent: {"burst": N}; worker: WAKE_STEPS untimed steps, then {"ns": [N step times],
  "disturbed": BOOL, "others_cores": X}: the burst's own disturbance reading
  (measure/disturbance.py).
  /proc/stat counts in 10 ms ticks, and that slack is in the threshold, so a burst of
  tens of milliseconds is flagged only when something else took most of a core;
- parent: {"stop": true}, or end of file: the loop ends and the repetition's result
  (every burst's samples) is written as usual.

The repetition has no disturbance reading of its own: between its bursts the other side's
worker runs, by design. What counts is each burst's reading, which the parent judges pair
by pair; their summary is returned for the repetition's details.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import IO

from stackcost.measure.counters import Edge, Window
from stackcost.measure.disturbance import assess
from stackcost.measure.memory import rss_bytes
from stackcost.measure.protocol import Measurement
from stackcost.measure.stats import summarize
from stackcost.measure.timer import CpuTimer, CudaTimer, Step

# Steps timed to tell the parent how long one takes: after the warmup, and in the parent's
# sizing burst once both sides are warm.
SIZING_STEPS = 3
# Untimed steps at the start of each burst. Between bursts the other side runs, so this
# worker's threads have gone to sleep (or its pool stopped spinning) and its caches hold
# the other's data: the first step pays for waking up. Timed, it made a burst of one
# eager resnet18 step (32 px, 2 threads) 1.42x torch.utils.benchmark's, whose timeit()
# runs two untimed calls first; a timed loop of back-to-back steps never pays it.
WAKE_STEPS = 1
STOP_REASON = "paced"


def _send(replies: IO[str], message: dict) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


def paced_loop(
    step: Step,
    timer: CpuTimer | CudaTimer,
    m: Measurement,
    commands: IO[str],
    replies: IO[str],
    confidence: float = 0.95,
) -> dict[str, float | int | None]:
    """Serve the parent's bursts into `m` (samples, RSS trace, stats) until stop; returns
    the bursts' summary: how many, how many disturbed, the most others took."""
    sizing: list[int] = []
    timer.run(step, SIZING_STEPS, sizing)
    _send(replies, {"ready": statistics.median(sizing)})
    samples = m.samples_ns
    bursts = disturbed = 0
    most: float | None = None
    start = time.perf_counter()
    for line in commands:
        command = json.loads(line)
        if command.get("stop"):
            break
        burst: list[int] = []
        edge = Edge.now()
        for _ in range(WAKE_STEPS):
            step()
        timer.run(step, int(command["burst"]), burst)
        reading = assess(Window.between(edge, Edge.now()))
        samples += burst
        bursts += 1
        if reading is not None:
            disturbed += reading.disturbed
            most = max(most or 0.0, reading.others_cores)
        m.rss_trace_bytes.append(rss_bytes())
        m.rss_trace_iters.append(len(samples))
        _send(
            replies,
            {
                "ns": burst,
                "disturbed": bool(reading and reading.disturbed),
                "others_cores": reading.others_cores if reading else None,
            },
        )
    m.timed_s = time.perf_counter() - start
    m.stop_reason = STOP_REASON
    m.stats = summarize(samples or sizing, confidence)
    return {"bursts": bursts, "disturbed": disturbed, "max_others_cores": most}
