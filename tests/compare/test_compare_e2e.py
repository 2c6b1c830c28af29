"""End to end: a slowed-down rerun fails the gate and is named; an identical rerun passes.

Also: the leak check flags a leaking step and leaves a clean one alone.
"""

from __future__ import annotations

import json

import pytest

from stackcost.api import run as measure
from stackcost.cli import main
from stackcost.compare.diff import load_side, run_to_json
from tests.conftest import FAST

BUSY = "tests.execute.fake_backends:BusyBackend"
LEAKY = "tests.execute.fake_backends:LeakyBackend"


def busy_spec():
    """What `measure("mlp", [BUSY], ...)` runs: three repetitions of one tiny cell."""
    from stackcost.runspec.run import model_ref, validate

    return validate(
        dict(
            models=[model_ref("mlp")],
            backends=[BUSY],
            batch_sizes=[2],
            sizes={"resolution": [4]},
            precisions=["fp32"],
            threads=[1],
            devices=["cpu"],
            repeats=3,
            protocol=FAST,
            # Workers get a whitelisted environment: the slowdown must be passed explicitly.
            inherit_env=["STACKCOST_TEST_BUSY_US"],
        )
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from stackcost.execute.local import LocalExecutor
    from stackcost.execute.runner import execute, prepare
    from stackcost.store.database import Store
    from tests.conftest import ROOT

    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", str(ROOT))
    db = tmp_path_factory.mktemp("cmp") / "s.db"
    # base, rerun, slowed. The step is mostly a fixed busy-wait, so the slowdown under test
    # (2x) dwarfs what the tiny eager call adds: that part moves 2x between processes here.
    # The three runs are one spec, asked about once (the delay is the workers' environment,
    # not the spec), on one executor: base and rerun fork from one warm starter, the slowed
    # run (another environment) from its own.
    prepared = prepare(busy_spec())
    executor = LocalExecutor()
    ids = []
    with executor.session(), Store(db) as store:
        for busy_us in (3000, 3000, 6000):
            mp.setenv("STACKCOST_TEST_BUSY_US", str(busy_us))
            result = execute(prepared, store, executor=executor, command="stackcost.run()")
            ids.append(result.run_id)
    mp.undo()
    return db, ids


def test_slowdown_regresses_and_is_named(runs, capsys, tmp_path):
    db, (base, _, slow) = runs
    md = tmp_path / "pr.md"
    code = main(["compare", base, slow, "--db", str(db), "--markdown", str(md)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert any("BusyBackend" in line and "regressed" in line for line in out.splitlines()), out
    print(out)
    text = md.read_text()
    print(text)
    assert "Performance regression" in text and "regressed" in text and "BusyBackend" in text


def test_identical_rerun_passes(runs, capsys):
    # Two stored runs minutes apart differ by up to ~10% on this step on a 2-core VM (and
    # up to 35% on a sub-millisecond one), which the 7% default cannot tell from a change:
    # separating drift from change is the interleaved A/B of issue 26. Here the gate must
    # pass a rerun at a threshold above that drift, and still fail the 2x slowdown above.
    db, (base, rerun, _) = runs
    code = main(["compare", base, rerun, "--db", str(db), "--threshold", "0.25"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "regressed" not in out


def test_sides_from_db_file_and_json(runs, capsys, tmp_path):
    db, (base, _, slow) = runs
    from stackcost.api import load

    path = tmp_path / "slow.json"
    path.write_text(run_to_json(load(db, slow)))
    assert main(["compare", base, str(path), "--db", str(db)]) == 1
    # the same JSON through the command line: stackcost report --format run-json
    exported = tmp_path / "exported.json"
    assert main(["report", slow, "--db", str(db), "--format", "run-json", "-o", str(exported)]) == 0
    assert main(["compare", base, str(exported), "--db", str(db)]) == 1
    assert load_side(str(db), db).label.endswith(f"({slow})")  # a DB file: its latest run
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"cells": [{"model": "mlp"}]}))
    assert main(["compare", base, str(summary), "--db", str(db)]) == 2
    assert "per-repetition samples" in capsys.readouterr().err


def test_bad_threshold_metric_is_a_usage_error(runs, capsys):
    db, (base, rerun, _) = runs
    assert main(["compare", base, rerun, "--db", str(db), "--threshold-metric", "speed=1"]) == 2
    assert main(["compare", base, "nope", "--db", str(db)]) == 2


def test_leak_is_flagged_and_clean_step_is_not(tmp_path):
    slow = FAST.model_copy(update={"min_time_s": 0.3, "target_ci": 1e-6, "max_time_s": 0.4})
    res = measure(
        "mlp",
        ["eager", LEAKY],
        batch_sizes=[2],
        resolutions=[4],
        threads=[1],
        db=tmp_path / "leak.db",
        protocol=slow,
    )
    df = res.to_dataframe().set_index("backend")
    assert bool(df.loc[LEAKY, "leak"]) is True, df.loc[LEAKY].to_dict()
    assert df.loc[LEAKY, "leak_bytes_per_iter"] > 32 * 1024
    assert not bool(df.loc["eager", "leak"]), df.loc["eager"].to_dict()
