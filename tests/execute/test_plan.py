"""The plan: grid order, resume counts, pruning after OOM/timeout, doubling search."""

from stackcost.execute.plan import Plan, series_key
from stackcost.result import RepetitionResult
from stackcost.spec.run import RunSpec, model_ref


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
