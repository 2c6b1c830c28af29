"""The worker's half of the burst design: what a burst times and what it answers."""

from __future__ import annotations

import io
import json

from stackcost.measure.bursts import SIZING_STEPS, WAKE_STEPS, paced_loop
from stackcost.measure.protocol import Measurement
from stackcost.measure.timer import CpuTimer


def test_each_burst_wakes_untimed_then_times_exactly_the_steps_asked() -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)

    sent = ({"burst": 4}, {"burst": 2}, {"stop": True})
    commands = io.StringIO("".join(json.dumps(c) + "\n" for c in sent))
    replies = io.StringIO()
    m = Measurement(cold_ns=0, output=None)
    summary = paced_loop(step, CpuTimer(), m, commands, replies)

    lines = [json.loads(line) for line in replies.getvalue().splitlines()]
    assert "ready" in lines[0] and lines[0]["ready"] > 0
    assert [len(r["ns"]) for r in lines[1:]] == [4, 2]  # the wake-up steps are not timed
    assert WAKE_STEPS == 1 and len(calls) == SIZING_STEPS + 4 + 2 + 2  # one untimed a burst
    assert len(m.samples_ns) == 6 and m.stop_reason == "paced"
    assert summary["bursts"] == 2 and m.stats is not None and m.stats.n == 6
