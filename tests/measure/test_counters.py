"""Counters at the timed loop's edges: exact CPU means, whatever the sampler saw."""

from __future__ import annotations

import time

import pytest

from stackcost.measure.counters import Edge, Window
from stackcost.measure.protocol import Protocol, measure
from stackcost.measure.sampler import summarize
from stackcost.measure.timer import CpuTimer

# A spinning loop's CPU time over its wall time: 1 core, less where the lane's core was
# taken from it for a while (0.80 seen in a full make test) and /proc's 10 ms ticks. The
# bounds catch a counter that reads nothing, or children or threads counted twice.
ONE_CORE = (0.5, 1.1)


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
    assert ONE_CORE[0] < w.cpu_s / seconds <= ONE_CORE[1]
    # /proc/stat counts this process too (in 10 ms ticks), so the system was at least as busy.
    assert w.system_busy_s is not None and w.system_busy_s >= w.cpu_s - 0.03


def test_measure_records_the_timed_loop_window():
    m = measure(lambda: spin(0.002), CpuTimer(), Protocol(min_time_s=0.1, warmup_max_time_s=0.1))
    assert m.window is not None
    seconds = (m.window.end_ns - m.window.start_ns) / 1e9
    assert seconds == pytest.approx(m.timed_s, rel=0.05)
    assert ONE_CORE[0] < m.window.cpu_s / seconds <= ONE_CORE[1]


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


# -- steal, context switches and frequency: parsing synthetic /proc text, and this machine --

STAT = (
    b"cpu  1000 10 300 9000 50 0 20 170 0 0\n"
    b"cpu0 600 10 200 4000 30 0 10 100 0 0\n"
    b"cpu1 400 0 100 5000 20 0 10 70 0 0\n"
    b"intr 12345 0 0\n"
)


def test_steal_is_the_eighth_value_and_is_inside_busy():
    from stackcost.measure.counters import TICK_S, busy_from_stat_line, steal_from_stat_line

    first = STAT.splitlines()[0]
    assert steal_from_stat_line(first) == pytest.approx(170 * TICK_S)
    assert busy_from_stat_line(first) == pytest.approx((1000 + 10 + 300 + 20 + 170) * TICK_S)
    # A kernel before the steal column (2.6.11) has none.
    assert steal_from_stat_line(b"cpu  1000 10 300 9000 50 0 20") == 0.0


def test_pinned_cpus_count_their_own_lines_only():
    from stackcost.measure.counters import TICK_S, stat_lines, steal_from_stat_line

    assert stat_lines(STAT) == [STAT.splitlines()[0]]
    mine = stat_lines(STAT, frozenset({1}))
    assert mine == [STAT.splitlines()[2]]
    assert sum(steal_from_stat_line(x) for x in mine) == pytest.approx(70 * TICK_S)
    assert len(stat_lines(STAT, frozenset({0, 1}))) == 2


CPUINFO = (
    b"processor\t: 0\nmodel name\t: Some CPU\ncpu MHz\t\t: 3000.000\n\n"
    b"processor\t: 1\nmodel name\t: Some CPU\ncpu MHz\t\t: 1200.500\n\n"
)


def test_cpuinfo_mhz_is_the_mean_of_the_counted_processors():
    from stackcost.measure.counters import mhz_from_cpuinfo

    assert mhz_from_cpuinfo(CPUINFO) == pytest.approx(2100.25)
    assert mhz_from_cpuinfo(CPUINFO, frozenset({1})) == pytest.approx(1200.5)
    # arm64 and some VMs list no "cpu MHz": unreadable, not zero.
    assert mhz_from_cpuinfo(b"processor\t: 0\nBogoMIPS\t: 50.00\n") is None


def test_cpuinfo_mhz_counts_only_where_the_kernel_samples_it():
    from stackcost.measure.counters import cpuinfo_mhz_is_measured

    metal = CPUINFO.replace(b"\n\n", b"\nflags\t\t: fpu tsc constant_tsc aperfmperf pni\n\n")
    vm = CPUINFO.replace(b"\n\n", b"\nflags\t\t: fpu tsc constant_tsc hypervisor pni\n\n")
    assert cpuinfo_mhz_is_measured(metal)
    assert not cpuinfo_mhz_is_measured(vm)  # the fixed TSC frequency: not a reading
    assert not cpuinfo_mhz_is_measured(b"processor\t: 0\nFeatures\t: fp asimd\n")


def test_the_window_is_the_difference_of_its_edges():
    a = Edge(0, 1.0, 10.0, 2.0, 100, 3000.0)
    b = Edge(2_000_000_000, 2.5, 13.0, 2.5, 160, 2800.0)
    w = Window.between(a, b)
    assert (w.cpu_s, w.system_busy_s, w.steal_s, w.involuntary_switches) == (1.5, 3.0, 0.5, 60)
    assert (w.cpu_mhz_start, w.cpu_mhz_end) == (3000.0, 2800.0)
    # An edge that could not read a counter leaves the window's unread too.
    unread = Window.between(Edge(0, 1.0, None), b)
    assert unread.steal_s is None and unread.involuntary_switches is None


def nonvoluntary_from_status(text: bytes) -> int:
    """/proc/<pid>/task/<tid>/status's nonvoluntary_ctxt_switches."""
    for line in text.splitlines():
        if line.startswith(b"nonvoluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise ValueError("no nonvoluntary_ctxt_switches line")


def test_status_parsing_on_synthetic_text():
    status = b"Name:\tpython\nvoluntary_ctxt_switches:\t1200\nnonvoluntary_ctxt_switches:\t37\n"
    assert nonvoluntary_from_status(status) == 37


def test_involuntary_switches_cover_every_thread_of_this_process():
    """getrusage's count is the per-thread sum of /proc/self/task/*/status (read before it,
    so it may only have grown), not the main thread's alone."""
    import os
    import threading

    from stackcost.measure.counters import involuntary_switches

    stop = threading.Event()
    worker = threading.Thread(target=lambda: stop.wait(5))
    worker.start()
    try:
        per_thread = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/status", "rb") as f:
                per_thread.append(nonvoluntary_from_status(f.read()))
        total = involuntary_switches()
    finally:
        stop.set()
        worker.join()
    assert len(per_thread) >= 2 and total >= sum(per_thread)


def test_edges_here_read_steal_and_switches():
    first = Edge.now()
    spin(0.05)
    w = Window.between(first, Edge.now())
    # Linux with /proc: steal is read (0 on bare metal), switches are a count.
    assert w.steal_s is not None and w.steal_s >= 0
    assert w.involuntary_switches is not None and w.involuntary_switches >= 0
    assert w.cpu_mhz_start is None or w.cpu_mhz_start > 0


def test_a_descendant_gone_unreaped_never_makes_the_family_spend_less_than_the_process():
    # The family's sum fell by a vanished descendant's time; the process's own rose 0.1 s.
    start = Edge(0, 5.0, 10.0, process_cpu_s=1.0)
    end = Edge(100_000_000, 4.0, 10.1, process_cpu_s=1.1)
    assert Window.between(start, end).cpu_s == pytest.approx(0.1)
