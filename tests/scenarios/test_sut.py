"""The system under test's threads: instance 0 is answered on the thread that warmed it
(the caller's), as the timed loop ran, whatever the scenario; LoadGen gets its own."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.scenarios.test_run import QUICK

pytest.importorskip("mlperf_loadgen")

from stackcost.scenarios.sut import run_scenario  # noqa: E402

# Server's peak search runs about 23 LoadGen tests: 20 ms each here, as which thread answers
# does not depend on their length. Offline keeps QUICK's one long query: a short one can be
# drained by instances 1-3 before instance 0 takes a sample.
SETTINGS = {"server": QUICK.model_copy(update={"min_duration_ms": 20})}
# Instances are a Server and Offline knob. Four of them: a stop taken by the wrong thread once left instance 0 waiting for ever.
# Each step sleeps (the GIL released, as a real step's kernels release it): with a step of a
# few microseconds the threads that were waiting first could drain Offline's whole query
# before the caller's thread took one sample (CI saw instance 0 answer none, offline-4).
STEP_S = 2e-4
CASES = [("single-stream", 1), ("server", 1), ("server", 4), ("offline", 1), ("offline", 4)]


@pytest.mark.parametrize(("name", "instances"), CASES)
def test_instance_0_runs_on_the_callers_thread(tmp_path: Path, name: str, instances: int) -> None:
    seen: list[set[int]] = [set() for _ in range(instances)]

    def step_of(i: int):
        def step() -> None:
            seen[i].add(threading.get_ident())
            time.sleep(STEP_S)

        return step

    settings = SETTINGS.get(name, QUICK)
    config = settings.model_copy(update={"instances": instances}).config(name)
    steps = [step_of(i) for i in range(instances)]
    result = run_scenario(config, steps, STEP_S * 1e9, tmp_path)
    assert result.value is not None
    assert seen[0] == {threading.get_ident()}
    for others in seen[1:]:
        assert threading.get_ident() not in others


def test_a_failing_step_is_raised_on_the_callers_thread(tmp_path: Path) -> None:
    def step() -> None:
        raise RuntimeError("step broke")

    with pytest.raises(RuntimeError, match="step broke"):
        run_scenario(SETTINGS["server"].config("server"), [step], 1e5, tmp_path)
