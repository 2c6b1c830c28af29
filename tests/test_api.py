"""End to end through the public API and the CLI, on tiny models."""

import sqlite3

import pytest

import stackcost
from stackcost.cli import main
from stackcost.errors import SpecError
from stackcost.result import MEASURED_STATUSES

FAST = dict(protocol={"min_time_s": 0.05, "max_time_s": 0.5, "warmup_max_time_s": 0.3})


def test_run_returns_typed_results_and_a_dataframe(tmp_path):
    db = tmp_path / "s.db"
    result = stackcost.run(
        "mlp", ["eager", "torchscript"], batch_sizes=[1, 2], resolutions=[8], db=db, **FAST
    )
    df = result.to_dataframe()
    assert len(df) == 4
    assert set(df["backend"]) == {"eager", "torchscript"}
    assert set(df["batch_size"]) == {1, 2}
    assert df["status"].isin(MEASURED_STATUSES).all(), df[["backend", "status", "reason"]]
    assert (df["median_ms"] > 0).all() and (df["max_rel_err"] <= 1e-4).all()
    # same weights in every process
    assert df["weights_digest"].nunique() == 1
    # and the same thing comes back from disk
    again = stackcost.load(db, result.run_id).to_dataframe()
    assert list(again["median_ms"]) == list(df["median_ms"])


def test_merge_and_environment_are_the_api_the_commands_call(tmp_path):
    a, b, merged = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "all.db"
    for db in (a, b):
        stackcost.run("mlp", ["eager"], resolutions=[8], db=db, **FAST)
    result = stackcost.merge([a, b], merged)
    assert result.total == 2 and len(stackcost.load(merged).records) == 1
    env = stackcost.environment()
    assert env["cpu"]["logical_cores"] >= 1 and env["stackcost"] == stackcost.__version__


def test_api_rejects_bad_input_before_writing(tmp_path):
    with pytest.raises(SpecError, match="batch size 0"):
        stackcost.run("mlp", ["eager"], batch_sizes=[0], db=tmp_path / "s.db")
    assert not (tmp_path / "s.db").exists()


def test_unavailable_and_unsupported_are_reported_and_others_run(tmp_path):
    db = tmp_path / "s.db"
    result = stackcost.run(
        "mlp",
        ["eager", "onnxruntime"],
        precisions=["bf16"],
        resolutions=[8],
        db=db,
        devices=["cpu", "cuda"],
        **FAST,
    )
    status = {(c.cell.backend, c.cell.device): c.status for c in result.cells()}
    assert status[("onnxruntime", "cpu")] == "unsupported"
    assert status[("eager", "cpu")] in MEASURED_STATUSES
    import torch

    if not torch.cuda.is_available():
        assert status[("eager", "cuda")] == "unavailable"
    assert not result.failed


def test_cli_factory_model_and_exit_code_on_wrong_backend(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    code = main(
        [
            "run",
            "--model",
            "tests.factories:tiny",
            "--input-shape",
            "1,2,2",
            "--backends",
            "eager,tests.execute.fake_backends:WrongBackend",
            "--db",
            db,
            "--quiet",
            "--min-time",
            "0.05",
            "--max-time",
            "0.5",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1  # a wrong cell fails the run
    assert "wrong" in out and "eager" in out
    rows = (
        sqlite3.connect(db)
        .execute("SELECT c.backend, r.status FROM repetitions r JOIN cells c ON c.id = r.cell_id")
        .fetchall()
    )
    assert sorted(s for _, s in rows)[-1] == "wrong"
