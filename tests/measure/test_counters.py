"""Counters at the timed loop's edges: exact CPU means, whatever the sampler saw."""

from __future__ import annotations

import time

import pytest

from stackcost.measure.counters import Edge, Window
from stackcost.measure.protocol import Protocol, measure
from stackcost.measure.sampler import summarize
from stackcost.measure.timer import CpuTimer


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_busy_window_reads_one_core():
    first = Edge.now()
    spin(0.2)
    w = Window.between(first, Edge.now())
    seconds = (w.end_ns - w.start_ns) / 1e9
    assert seconds >= 0.2
    assert w.cpu_s / seconds == pytest.approx(1.0, abs=0.1)
    # /proc/stat counts this process too (in 10 ms ticks), so the system was at least as busy.
    assert w.system_busy_s is not None and w.system_busy_s >= w.cpu_s - 0.03


def test_measure_records_the_timed_loop_window():
    m = measure(lambda: spin(0.002), CpuTimer(), Protocol(min_time_s=0.1, warmup_max_time_s=0.1))
    assert m.window is not None
    seconds = (m.window.end_ns - m.window.start_ns) / 1e9
    assert seconds == pytest.approx(m.timed_s, rel=0.05)
    assert m.window.cpu_s / seconds == pytest.approx(1.0, abs=0.1)


def test_edge_counters_replace_interpolated_means():
    # Two samples 1 s apart around a 0.2 s window: interpolation can only say "0.5 cores",
    # the window's own counters say what happened inside it.
    samples = [
        {"t": 0, "cpu": 0.0, "rss": 1, "sys": 0.0, "self": 0.0, "load1": 0.0},
        {"t": 1_000_000_000, "cpu": 0.5, "rss": 1, "sys": 0.6, "self": 0.0, "load1": 0.0},
    ]
    start, end = 400_000_000, 600_000_000
    blurred = summarize(samples, start, end, header={"logical_cpus": 2})
    assert blurred.cpu_util_cores_mean == pytest.approx(0.5)
    assert blurred.means_from.startswith("samples")
    exact = summarize(
        samples, start, end, header={"logical_cpus": 2}, counters=Window(start, end, 0.2, 0.3)
    )
    assert exact.cpu_util_cores_mean == pytest.approx(1.0)
    assert exact.system_busy_cores_mean == pytest.approx(1.5)
    assert exact.other_busy_cores_mean == pytest.approx(0.5) and exact.busy_machine
    assert exact.means_from.startswith("the measured process's counters")


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


def test_a_reaped_childs_cpu_is_the_families():
    """A compiler that Inductor runs and waits for is the cell's work, not another's."""
    import subprocess
    import sys

    from stackcost.measure.counters import family_cpu_s

    before = family_cpu_s()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    assert family_cpu_s() - before >= 0.3


def test_a_live_child_counts_in_its_group_and_not_outside_it():
    """A compile-worker pool (same group) counts; the --profile sampler (own group) not."""
    import subprocess
    import sys
    import time

    from stackcost.measure.counters import family_cpu_s

    spin = BURN + "time.sleep(30)\n"
    for own_group, counted in ((False, True), (True, False)):
        before = family_cpu_s()
        child = subprocess.Popen([sys.executable, "-c", spin], start_new_session=own_group)
        try:
            time.sleep(1.0)  # its 0.3 s of CPU is spent, and it is still alive
            grew = family_cpu_s() - before
        finally:
            child.kill()
            child.wait()
        assert (grew >= 0.25) is counted, (own_group, grew)
