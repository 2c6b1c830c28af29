import time

import pytest

from stackcost.measure.protocol import Protocol, measure
from stackcost.measure.timer import CpuTimer, timer_for


def busy(us: float):
    def step():
        end = time.perf_counter_ns() + int(us * 1000)
        while time.perf_counter_ns() < end:
            pass

    return step


@pytest.mark.parametrize("us", [200, 2000])
def test_timer_measures_known_durations(us):
    samples: list[int] = []
    CpuTimer().run(busy(us), 50, samples)
    median_us = sorted(samples)[len(samples) // 2] / 1000
    assert us <= median_us < us * 1.5 + 20


def test_time_once_returns_the_output():
    ns, out = CpuTimer().time_once(lambda: 42)
    assert out == 42 and ns >= 0


def test_sleep_is_timed_as_wall_time():
    ns, _ = CpuTimer().time_once(lambda: time.sleep(0.02))
    assert 0.02 <= ns / 1e9 < 0.2


def test_protocol_converges_on_a_steady_step():
    p = Protocol(min_time_s=0.1, min_iters=10, max_time_s=5, warmup_max_time_s=1)
    m = measure(busy(500), CpuTimer(), p)
    assert m.stop_reason == "converged" and m.warmup_settled
    assert m.stats.n >= 10 and m.stats.ci_half_width_rel <= 0.02
    assert m.stats.median_ms == pytest.approx(0.5, rel=0.3)


def test_protocol_flags_a_noisy_step_hitting_the_cap():
    import random

    rng = random.Random(0)

    def noisy():
        busy(rng.choice([100, 2000]))()

    p = Protocol(
        min_time_s=0.05, min_iters=5, max_time_s=0.3, target_ci=0.001, warmup_max_time_s=0.2
    )
    m = measure(noisy, CpuTimer(), p)
    assert m.stop_reason == "time cap" and m.unstable


def test_cold_call_is_kept_apart_from_samples():
    calls = []

    def step():
        if not calls:
            time.sleep(0.05)  # a "compile" on first call
        calls.append(1)

    p = Protocol(min_time_s=0.02, min_iters=5, max_time_s=1, warmup_max_time_s=0.2)
    m = measure(step, CpuTimer(), p)
    assert m.cold_ns >= 50e6
    assert max(m.samples_ns) < 50e6


def test_cold_output_is_kept_out_of_a_buffer_the_next_call_reuses():
    buffer = [0]

    def step():  # like OpenVINO's request: every call writes into the same buffer
        buffer[0] += 1
        return buffer

    p = Protocol(min_time_s=0.02, min_iters=5, max_time_s=0.2, warmup_max_time_s=0.1)
    assert measure(step, CpuTimer(), p).output is buffer  # held as is: overwritten later
    buffer[0] = 0
    m = measure(step, CpuTimer(), p, keep=list)
    assert m.output == [1] and buffer[0] > 1


@pytest.mark.gpu
def test_cuda_timer_needs_a_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: CudaTimer is exercised only where a GPU exists")
    samples: list[int] = []
    timer_for("cuda").run(lambda: torch.ones(1000, device="cuda").sum(), 10, samples)
    assert len(samples) == 10


def test_iteration_cap_with_a_tight_ci_counts_as_converged():
    p = Protocol(min_time_s=10, min_iters=5, max_iters=2000, max_time_s=10, warmup_max_time_s=0.2)
    m = measure(busy(5), CpuTimer(), p)
    assert len(m.samples_ns) == 2000
    assert m.stop_reason == "converged" and not m.unstable
