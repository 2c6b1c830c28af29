"""The timed loop's verdict: a repetition the time cap stopped says what would reach the
target, from its own pace (the CI of a median narrows as 1/sqrt(n))."""

from __future__ import annotations

from stackcost.measure.protocol import Measurement, Protocol
from stackcost.measure.stats import summarize
from stackcost.scenarios.timed_loop import _verdict


def capped(samples_ns: list[int], timed_s: float, reason: str = "time cap") -> Measurement:
    m = Measurement(cold_ns=samples_ns[0], output=None, samples_ns=samples_ns, timed_s=timed_s)
    m.stats, m.stop_reason = summarize(samples_ns), reason
    return m


def test_a_capped_repetition_estimates_the_max_time_its_target_needs():
    # 16 iterations of ~1.2 s, spread over two modes: the median's CI is far from +/-2%.
    samples = [1_100_000_000 + (i % 4) * 30_000_000 for i in range(16)]
    m = capped(samples, 20.0)
    status, reason = _verdict(m, None, Protocol())
    ci = m.stats.ci_half_width_rel
    assert status == "unstable" and ci > 0.02
    needed = round(20.0 * (ci / 0.02) ** 2)
    assert f"after 16 iterations; CI of median +/-{ci:.1%}" in reason
    assert f"--max-time {needed}" in reason or f"--max-time {needed + 1}" in reason
    assert "estimated" in reason and "--repeats 3" in reason


def test_converged_and_wrong_say_nothing_of_time():
    samples = [1_000_000] * 50
    assert _verdict(capped(samples, 1.0, "converged"), None, Protocol()) == ("ok", "")
    assert _verdict(capped(samples, 1.0), "outputs differ", Protocol()) == (
        "wrong",
        "outputs differ",
    )


def test_a_loop_too_noisy_for_time_is_sent_to_repetitions():
    # Half the iterations at 1 ms, half at 3 ms: the median's CI spans both modes.
    samples = [1_000_000, 3_000_000] * 20
    status, reason = _verdict(capped(samples, 20.0), None, Protocol())
    assert status == "unstable" and "out of reach by time alone" in reason
    assert "--max-time" not in reason and "--repeats 3" in reason
