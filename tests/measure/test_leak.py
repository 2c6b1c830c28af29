"""The leak check on synthetic RSS traces, and the rule that a view shows a leak only when
repetitions agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console

from stackcost.measure.leak import check_leak, confirmed
from stackcost.measure.protocol import Protocol
from stackcost.measure.stats import summarize
from stackcost.report.terminal.run import results_table
from stackcost.result import RepetitionResult
from stackcost.store.runs import CellResult, RunResult
from tests.conftest import tiny_cell

RSS = 300 * 2**20
MiB = 2**20


def trace(per_iter: float, noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    iters = [int(100 * 1.3**k) for k in range(12)]
    return iters, [int(RSS + per_iter * i + rng.normal(0, noise)) for i in iters]


def loop_iters(last: int, window: int = 2) -> list[int]:
    """The iteration counts the timed loop reads RSS at: batches of a check interval's
    worth of iterations, or a quarter of the samples so far (protocol.timed_loop)."""
    n, out = 0, []
    while n < last:
        n += max(window, n // 4)
        out.append(n)
    return out


def stepped(iters: list[int], steps: dict[int, int]) -> list[int]:
    """Flat RSS that jumps by steps[k] bytes from iteration k on: an allocator warming up."""
    return [RSS + sum(b for at, b in steps.items() if i >= at) for i in iters]


def test_steady_growth_is_a_leak():
    res = check_leak(*trace(4096, noise=20_000))
    assert res is not None and res["leak"] and 3000 < res["bytes_per_iter"] < 5000
    assert 3000 < res["late_bytes_per_iter"] < 5000


def test_twenty_kib_per_iteration_throughout_is_a_leak():
    iters = loop_iters(220)
    res = check_leak(iters, [RSS + 20 * 1024 * i for i in iters])
    assert res is not None and res["leak"], res
    assert res["late_bytes_per_iter"] == 20 * 1024


def test_warm_up_steps_then_a_plateau_are_not_a_leak():
    # What eager resnet18 b8 showed: RSS steps up by ~2 MiB once or twice (glibc moving a
    # buffer size from mmap to the heap), then stays flat. Over the whole loop that reads
    # as a slope of ~20 KiB/iter (the flag the demo showed); the later half is flat.
    iters = loop_iters(220)
    rss = stepped(iters, {30: 2 * MiB + MiB // 2, 90: 2 * MiB + MiB // 2})
    res = check_leak(iters, rss)
    assert res["bytes_per_iter"] > 10 * 1024 and res["low"] > 64  # the whole loop: a slope
    assert not res["leak"], res
    assert res["late_low"] <= 64  # flat in the later half


def test_a_step_in_the_later_half_is_not_a_leak():
    iters = loop_iters(1000)
    res = check_leak(iters, stepped(iters, {700: 6 * MiB}))
    assert not res["leak"], res


def test_flat_noisy_and_harness_growth_are_not():
    assert not check_leak(*trace(0, noise=50_000))["leak"]
    assert not check_leak(*trace(36))["leak"]  # what keeping the samples costs


def test_one_off_jump_is_not_a_leak():
    iters, rss = trace(0)
    rss = [r + (8 * 2**20 if k == 5 else 0) for k, r in enumerate(rss)]  # one transient spike
    assert not check_leak(iters, rss)["leak"]


def test_too_few_points():
    assert check_leak([1, 2, 3], [1, 2, 3]) is None


LEAK = {"leak": True, "bytes_per_iter": 21_000.0, "late_bytes_per_iter": 20_000.0}
CLEAN = {"leak": False, "bytes_per_iter": 100.0, "late_bytes_per_iter": None}


def test_a_leak_is_confirmed_only_by_repetitions_that_agree():
    assert confirmed([LEAK]) is None  # one repetition alone
    assert confirmed([LEAK, CLEAN, CLEAN]) is None
    assert confirmed([LEAK, LEAK, CLEAN, CLEAN]) is None  # not most of them
    assert confirmed([LEAK, {**LEAK, "late_bytes_per_iter": 30_000.0}, CLEAN]) == 20_000.0
    assert confirmed([LEAK, LEAK, None]) == 20_000.0  # a repetition with no check
    old = {"leak": True, "bytes_per_iter": 21_000.0}  # stored before the later-half fit
    assert confirmed([old, old]) == 21_000.0


def _rep(i: int, leak: dict | None) -> RepetitionResult:
    samples = [1_000_000 + 1000 * (k % 7) for k in range(200)]
    return RepetitionResult(
        status="ok", repetition=i, stats=summarize(samples), samples_ns=samples, leak=leak
    )


def _table(leaks: list[dict | None]) -> str:
    cell = tiny_cell()
    run = RunResult(
        run_id="r",
        db_path=Path("unused.db"),
        env={},
        spec={"repeats": len(leaks), "protocol": Protocol().model_dump()},
        records=[(cell, _rep(i, leak)) for i, leak in enumerate(leaks)],
    )
    console = Console(width=250, record=True)
    console.print(results_table(run))
    return console.export_text()


def test_the_table_shows_a_leak_only_when_repetitions_agree():
    # One repetition in all: its flag is shown, marked unconfirmed, never as a leak.
    alone = _table([LEAK])
    assert "leak? 19.5 KiB/iter (1 rep)" in alone and "leak 19" not in alone
    assert "leak" not in _table([CLEAN])
    assert "leak" not in _table([LEAK, CLEAN])
    assert "leak 19.5 KiB/iter" in _table([LEAK, LEAK])
    reps = [_rep(0, LEAK), _rep(1, CLEAN), _rep(2, LEAK)]
    assert CellResult(tiny_cell(), reps).leak_bytes_per_iter == 20_000.0
