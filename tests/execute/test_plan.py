"""The plan: grid order, resume counts, pruning after OOM/timeout, doubling search."""

from stackcost.execute.plan import Plan, series_key
from stackcost.result import RepetitionResult
from stackcost.runspec.run import RunSpec, model_ref


def spec(**kw) -> RunSpec:
    fields = dict(models=[model_ref("mlp")], backends=["eager", "onnxruntime"], resolutions=[8])
    fields.update(kw)
    return RunSpec(**fields)


def ok(throughput: float = 100.0) -> RepetitionResult:
    return RepetitionResult(status="ok", throughput=throughput)


def drain(plan: Plan, outcome) -> list[tuple[str, int, int]]:
    """Run the plan to the end, answering each cell with outcome(cell)."""
    seen = []
    for cell, rep in plan.next_cells():
        seen.append((cell.backend, cell.batch_size, rep))
        reason = plan.skip_reason(cell)
        plan.observe(
            cell, RepetitionResult(status="skipped", reason=reason) if reason else outcome(cell)
        )
    return seen


def test_grid_runs_each_cell_repeats_times_interleaved():
    plan = Plan(spec(batch_sizes=[1, 2], repeats=2))
    seen = drain(plan, lambda c: ok())
    assert len(seen) == 8
    assert [r for *_, r in seen] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(plan.missing(c) == 0 for c in plan.grid())


def test_resume_runs_only_what_is_missing_and_reruns_interrupted():
    s = spec(batch_sizes=[1, 2], repeats=2)
    first = Plan(s)
    history = []
    for i, (cell, _) in enumerate(first.next_cells()):
        status = "interrupted" if i == 3 else "ok"
        history.append((cell, RepetitionResult(status=status)))
        first.observe(cell, history[-1][1])
        if i == 3:
            break
    resumed = Plan(s)
    for cell, result in history:
        resumed.observe(cell, result)
    seen = drain(resumed, lambda c: ok())
    assert len(seen) == 8 - 3  # 3 completed before the interruption
    assert all(resumed.done[c.key()] == 2 for c in resumed.grid())


def test_a_stopped_sweep_that_kept_rates_is_run_again_by_a_resume_only():
    s = spec(backends=["eager"], repeats=1)
    stopped = RepetitionResult(status="oom", reason="killed", details={"rates_kept": 2})
    assert stopped.owed and not RepetitionResult(status="oom").owed
    (cell,) = s.cells()
    same_run = Plan(s)
    same_run.observe(cell, stopped)  # the run that stored it goes on to other cells
    assert list(same_run.next_cells()) == []
    resumed = Plan(s)
    resumed.observe(cell, stopped, replayed=True)  # a resume goes on from its kept rates
    assert list(resumed.next_cells()) == [(cell, 0)]


def test_oom_prunes_larger_batches_of_the_same_series_only():
    plan = Plan(spec(batch_sizes=[1, 2, 4, 8], repeats=2))

    def outcome(cell):
        if cell.backend == "onnxruntime" and cell.batch_size == 2:
            return RepetitionResult(status="oom", reason="killed")
        return ok()

    drain(plan, outcome)
    grid = {(c.backend, c.batch_size): c for c in plan.grid()}
    assert plan.skip_reason(grid[("onnxruntime", 4)]) == "oom at batch 2"
    assert plan.skip_reason(grid[("onnxruntime", 1)]) is None
    assert plan.skip_reason(grid[("eager", 8)]) is None
    # every cell still has exactly `repeats` recorded repetitions
    assert all(plan.done[c.key()] == 2 for c in plan.grid())


def test_series_key_ignores_only_the_batch():
    a, b = spec(batch_sizes=[1, 2]).cells()[:2], spec(batch_sizes=[1], threads=[2]).cells()[0]
    assert series_key(a[0]) != series_key(a[1])  # different backends
    assert series_key(a[0]) == series_key(a[0].model_copy(update={"batch_size": 64}))
    assert series_key(a[0]) != series_key(b)


def test_doubling_stops_when_throughput_stops_improving():
    plan = Plan(spec(backends=["eager"], find_max_batch=True, max_batch=1024, repeats=1))
    curve = {1: 100, 2: 190, 4: 350, 8: 500, 16: 505, 32: 400, 64: 300}
    seen = drain(plan, lambda c: ok(curve.get(c.batch_size, 1.0)))
    assert [b for _, b, _ in seen] == [1, 2, 4, 8, 16, 32]  # two non-improving steps
    best = plan.best_batches(
        [c for c in [plan.grid()[0].model_copy(update={"batch_size": b}) for b in curve]]
    )
    assert list(best.values()) == [(16, 505)]


def test_doubling_stops_at_oom_and_at_max_batch():
    plan = Plan(spec(backends=["eager"], find_max_batch=True, max_batch=1024))
    seen = drain(
        plan, lambda c: RepetitionResult(status="oom") if c.batch_size == 8 else ok(c.batch_size)
    )
    assert [b for _, b, _ in seen] == [1, 2, 4, 8]
    plan = Plan(spec(backends=["eager"], find_max_batch=True, max_batch=4))
    seen = drain(plan, lambda c: ok(c.batch_size * 10))
    assert [b for _, b, _ in seen] == [1, 2, 4]


def timed(median_ms: float, wobble: float = 0.0, n: int = 40) -> RepetitionResult:
    """A valid repetition whose samples sit at median_ms, its windows apart by `wobble`."""
    samples = [int(median_ms * 1e6 * (1 + wobble * (i * 4 // n % 2))) for i in range(n)]
    return RepetitionResult(status="ok", throughput=1.0, samples_ns=samples)


def rule_spec(**kw) -> RunSpec:
    return spec(backends=["eager"], cell_ci=0.02, max_repeats=6, **kw)


def test_the_stop_rule_ends_a_cell_whose_processes_agree_after_the_first_round():
    plan = Plan(rule_spec())
    seen = drain(plan, lambda c: timed(10.0))
    assert [rep for *_, rep in seen] == [0, 1, 2]  # max(repeats, 3), and no more


def test_the_stop_rule_repeats_a_cell_whose_processes_differ_up_to_max_repeats():
    medians = iter([10.0, 13.0] * 10)
    plan = Plan(rule_spec())
    seen = drain(plan, lambda c: timed(next(medians)))
    assert [rep for *_, rep in seen] == [0, 1, 2, 3, 4, 5]
    (cell,) = plan.grid()
    assert plan.interval_width(cell) > 0.02


def test_the_stop_rule_adds_cheaper_processes_when_they_differ_and_longer_when_noise_does():
    cell = Plan(rule_spec()).grid()[0]
    biased = Plan(rule_spec(protocol={"min_time_s": 1.0}))
    for median in (10.0, 13.0, 10.0):  # steady within, far apart between: a bias
        biased.observe(cell, timed(median))
    assert biased.protocol_for(cell, 2) is None  # the first round keeps the run's own
    assert biased.protocol_for(cell, 3).min_time_s == 0.5
    noisy = Plan(rule_spec(protocol={"min_time_s": 1.0}))
    for median in (10.0, 10.4, 10.0):  # windows 30% apart inside each process
        noisy.observe(cell, timed(median, wobble=0.3))
    assert noisy.protocol_for(cell, 3).min_time_s == 2.0


def test_the_stop_rule_stops_at_a_repetition_more_processes_would_not_mend():
    results = iter([timed(10.0), RepetitionResult(status="wrong"), timed(13.0)] + [timed(10.0)] * 9)
    plan = Plan(rule_spec())
    seen = drain(plan, lambda c: next(results))
    assert len(seen) == 3


def test_without_the_rule_the_first_round_is_exactly_repeats():
    plan = Plan(spec(backends=["eager"], repeats=2))
    medians = iter([10.0, 13.0])
    assert len(drain(plan, lambda c: timed(next(medians)))) == 2
