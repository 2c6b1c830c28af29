"""The measuring API: checks before anything is written, one call that measures a spec,
and the one-line verdicts the commands print."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stackcost.api import executors, grid
from stackcost.errors import SpecError
from stackcost.result import MEASURED_STATUSES
from stackcost.runspec.run import model_ref, validate

QUICK = {"min_time_s": 0.05, "max_time_s": 0.3, "warmup_max_time_s": 0.2}


def tiny_spec():
    return validate(
        {
            "models": [model_ref("mlp")],
            "backends": ["eager"],
            "sizes": {"resolution": [4]},
            "threads": [1],
            "protocol": QUICK,
        }
    )


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"on_disturbed": "maybe"}, "--on-disturbed 'maybe' is not a policy"),
        ({"executor": executors.ExecutorChoice(kind="dask")}, "--executor 'dask'"),
        (
            {"executor": executors.ExecutorChoice(kind="ray", ray_address="nowhere")},
            "--ray-address 'nowhere'",
        ),
        (
            {"executor": executors.ExecutorChoice(kind="ray", ray_connect_timeout_s=0.0)},
            "--ray-connect-timeout",
        ),
        ({"executor": executors.ExecutorChoice(kind="ray", wait=False)}, "--no-wait"),
    ],
)
def test_measure_refuses_bad_input_before_writing(tmp_path, kwargs, needle):
    db = tmp_path / "s.db"
    with pytest.raises(SpecError, match=needle.replace("'", ".")):
        grid.measure(tiny_spec(), db, **kwargs)
    assert not db.exists()


def test_measure_a_spec_with_callbacks(tmp_path):
    db = tmp_path / "s.db"
    seen: dict[str, list] = {"open": [], "result": []}
    result = grid.measure(
        tiny_spec(),
        db,
        command="test",
        on_open=lambda run_id, resumed, stored: seen["open"].append((resumed, stored)),
        on_result=lambda cell, rep, done, total: seen["result"].append((done, total)),
    )
    assert seen == {"open": [(False, 0)], "result": [(1, 1)]}
    assert [rep.status in MEASURED_STATUSES for _, rep in result.records] == [True]
    assert db.exists()


def run_of(*statuses: str, stopped: str = "", reason: str = "") -> SimpleNamespace:
    reps = [SimpleNamespace(status=s, reason=reason) for s in statuses]
    return SimpleNamespace(stopped=stopped, records=[(None, rep) for rep in reps])


def test_gate_problem_says_why_in_one_line():
    assert grid.gate_problem([run_of("ok", "failed")]) is None
    assert grid.gate_problem([run_of("ok", stopped="disturbed")]) == "stopped: disturbed"
    assert grid.gate_problem([run_of()]) == "nothing was measured cleanly (no cells)"
    crashed = run_of(
        "crashed", "crashed", reason="Traceback (most recent call last):\nMemoryError: boom"
    )
    assert grid.gate_problem([crashed]) == (
        "nothing was measured cleanly (2 crashed); first reason: MemoryError: boom"
    )
    assert grid.gate_problem([crashed], first_reason=False) == (
        "nothing was measured cleanly (2 crashed)"
    )
