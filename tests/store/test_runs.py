"""CellResult's uncertainty is the cell's: an interval over its repetitions (each its own
process), and `unstable` when their medians disagree beyond the run's target."""

from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from stackcost.measure.protocol import Protocol
from stackcost.measure.stats import summarize
from stackcost.result import RepetitionResult
from stackcost.store.database import Store
from stackcost.store.runs import CellResult, RunResult
from tests.conftest import tiny_cell

# Repetition medians (ms) measured here: six processes, each settled to its ±2% target,
# whose pooled iterations claimed ±0.1%.
SPREAD = [0.522, 0.686, 0.531, 0.529, 0.543, 0.528]
AGREE = [0.500, 0.503, 0.505]  # within 1% of each other


def _rep(median_ms: float, i: int, status: str = "ok", reason: str = "") -> RepetitionResult:
    """A repetition of 400 tight iterations around `median_ms` (its own CI is ~±0.1%)."""
    rng = np.random.default_rng(i)
    samples = [int(median_ms * 1e6 * (1 + 0.01 * x)) for x in rng.standard_normal(400)]
    return RepetitionResult(
        status=status,
        reason=reason,
        repetition=i,
        stats=summarize(samples),
        samples_ns=samples,
        throughput=1 / median_ms,
    )


def _cell(medians: list[float], target: float | None = 0.02) -> CellResult:
    return CellResult(tiny_cell(), [_rep(m, i) for i, m in enumerate(medians)], target_ci=target)


def test_the_interval_comes_from_the_repetition_medians_not_the_pooled_iterations():
    c = _cell(SPREAD)
    medians = c.repetition_medians
    assert len(medians) == 6
    low, high = sps.t.interval(0.95, 5, loc=np.mean(medians), scale=sps.sem(medians))
    assert (c.interval.low_ms, c.interval.high_ms) == (pytest.approx(low), pytest.approx(high))
    assert c.interval.method == "t-interval over 6 repetition medians"
    assert c.interval.half_width_rel > 0.1
    assert c.stats.ci_half_width_rel < 0.01  # what the pooled iterations would have claimed


def test_repetitions_that_disagree_make_an_ok_cell_unstable():
    c = _cell(SPREAD)
    assert [r.status for r in c.repetitions] == ["ok"] * 6
    assert c.repetition_status == "ok"
    assert c.status == "unstable" and c.valid and not c.trusted
    assert c.spread_reason.startswith("repetition medians disagree: 6 span 0.52")
    assert "for target ±2.0%" in c.spread_reason
    assert c.reason == c.spread_reason


def test_repetitions_that_agree_stay_ok():
    c = _cell(AGREE)
    assert c.status == "ok" and c.trusted and c.spread_reason == "" and c.reason == ""
    assert c.interval is not None and c.interval.n == 3


def test_the_target_decides():
    assert _cell(AGREE, target=0.002).status == "unstable"
    assert _cell(SPREAD, target=0.5).status == "ok"
    assert _cell(SPREAD, target=None).status == "ok"  # no protocol (training): no rule


def test_one_repetition_has_no_interval_across_processes():
    c = _cell([0.514])
    assert c.interval is None and c.spread_reason == "" and c.status == "ok"
    assert c.repetitions[0].stats.ci_half_width_rel < 0.01  # its own, within-process


def test_a_repetition_s_own_status_and_reason_come_first():
    reps = [_rep(m, i) for i, m in enumerate(SPREAD)]
    reps[1] = _rep(SPREAD[1], 1, "unstable", "time cap reached before the CI target")
    c = CellResult(tiny_cell(), reps, target_ci=0.02)
    assert c.repetition_status == c.status == "unstable"
    assert c.reason == "time cap reached before the CI target"
    assert c.spread_reason  # still exposed: compare can tell the two apart
    reps[1] = _rep(SPREAD[1], 1, "disturbed", "other processes used the cores")
    assert CellResult(tiny_cell(), reps, target_ci=0.02).status == "disturbed"


def test_a_stored_run_carries_its_protocol_target_to_its_cells(tmp_path):
    spec = {"repeats": 3, "protocol": Protocol(target_ci=0.01).model_dump()}
    with Store(tmp_path / "s.db") as store:
        run_id = store.create_run(spec, {})
        cell_id = store.add_cell(run_id, tiny_cell())
        for i, m in enumerate([0.500, 0.507, 0.503]):  # a 1.4% range
            store.add_repetition(cell_id, _rep(m, i))
        store.finish_run(run_id)
    with Store(tmp_path / "s.db") as store:
        run = RunResult.from_store(store, run_id)
    (c,) = run.cells()
    assert (run.target_ci, c.target_ci) == (0.01, 0.01)
    assert c.status == "ok"  # 1.4% is within 1.69 x 1%
    # The same repetitions under a run asking ±0.5%:
    run.spec["protocol"]["target_ci"] = 0.005
    assert run.cells()[0].status == "unstable"
    # Per repetition, the frame labels its CI as what it is: within one process.
    df = run.to_dataframe()
    assert {"within_ci_low_ms", "within_ci_high_ms"} <= set(df.columns)
    assert "ci_low_ms" not in df.columns


def test_a_run_without_a_protocol_has_no_target():
    run = RunResult("r", Path("s.db"), {}, {"repeats": 2}, [])
    assert run.target_ci is None and run.confidence == 0.95
