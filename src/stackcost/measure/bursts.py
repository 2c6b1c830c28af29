"""The timed loop paced by a parent in bursts: `ab`'s burst design (execute/paced.py).

On a 2-vCPU VM the noise comes in modes that last seconds (issue 40): two measurements
taken tens of milliseconds apart see the same mode, and it cancels in their ratio. So
the parent holds one warm worker per side and alternates short bursts between them; this
module is the worker's half. After the cold call and the warmup, instead of the stop
rule, the worker serves bursts until the parent says stop.

Protocol, one JSON line each way. The worker writes replies to its reply file (a pipe
the parent passed it) and reads commands on stdin. A burst is N units: N steps of the
timed loop (paced_loop), or N whole generations (scenarios/generate.py):
- worker: {"ready": UNIT_NS} once warm (the median of a few steps, or one generation). The
  parent sizes the bursts from a first burst once both sides are ready, not from this: the
  other worker may still have been warming up beside it (execute/interleave.burst_steps);
- parent: {"burst": N}; worker: the burst, then {"ns": [N unit times], "disturbed": BOOL,
  "others_cores": X} and whatever else the unit measures (a generation's "ttft_ns" and
  "tpot_ns"): the burst's own disturbance reading (measure/disturbance.py).
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
import resource
import statistics
import time
from collections.abc import Callable
from typing import IO, Any

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


# What a generation's burst replies besides its generations' end-to-end "ns": their TTFTs,
# and all their decode steps (scenarios/generate.py writes them, execute/interleave reads).
TTFT_NS, TPOT_NS = "ttft_ns", "tpot_ns"
# A burst of N units: what its reply says of them besides the disturbance ("ns": N times).
Burst = Callable[[int], dict[str, Any]]


def serve_bursts(
    burst: Burst, ready_ns: float, commands: IO[str], replies: IO[str]
) -> dict[str, float | int | None]:
    """Say ready, then run the parent's bursts, each with its disturbance reading, until
    stop; returns the bursts' summary: how many, how many disturbed, the most others took."""
    _send(replies, {"ready": ready_ns})
    bursts = disturbed = 0
    most: float | None = None
    for line in commands:
        command = json.loads(line)
        if command.get("stop"):
            break
        edge = Edge.now()
        reply = burst(int(command["burst"]))
        reading = assess(Window.between(edge, Edge.now()))
        bursts += 1
        if reading is not None:
            disturbed += reading.disturbed
            most = max(most or 0.0, reading.others_cores)
        _send(
            replies,
            reply
            | {
                "disturbed": bool(reading and reading.disturbed),
                "others_cores": reading.others_cores if reading else None,
            },
        )
    return {"bursts": bursts, "disturbed": disturbed, "max_others_cores": most}


def paced_loop(
    step: Step,
    timer: CpuTimer | CudaTimer,
    m: Measurement,
    commands: IO[str],
    replies: IO[str],
    confidence: float = 0.95,
) -> dict[str, float | int | None]:
    """Serve the parent's bursts of steps into `m` (samples, RSS trace, stats) until stop;
    returns the bursts' summary (serve_bursts)."""
    sizing: list[int] = []
    timer.run(step, SIZING_STEPS, sizing)
    samples = m.samples_ns
    ran = 0  # steps in bursts, the untimed wake steps included: what the faults are over

    def burst(steps: int) -> dict[str, Any]:
        nonlocal ran
        ns: list[int] = []
        for _ in range(WAKE_STEPS):
            step()
        timer.run(step, steps, ns)
        ran += WAKE_STEPS + steps
        samples.extend(ns)
        m.rss_trace_bytes.append(rss_bytes())
        m.rss_trace_iters.append(len(samples))
        return {"ns": ns}

    start = time.perf_counter()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    summary = serve_bursts(burst, statistics.median(sizing), commands, replies)
    m.timed_s = time.perf_counter() - start
    if ran:
        m.page_faults_per_step = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / ran
    m.stop_reason = STOP_REASON
    m.stats = summarize(samples or sizing, confidence)
    return summary
