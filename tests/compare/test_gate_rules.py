"""The gate's two rules, on stores written through Store: no verdict from fewer than 3
repetitions a side, and none over an unstable or disturbed baseline. Both pass the gate
(exit 0) and say so in the terminal, the markdown and the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stackcost.cli import main
from stackcost.compare.diff import compare_sides, load_side
from stackcost.compare.render import as_json
from stackcost.measure.disturbance import Disturbance
from stackcost.measure.stats import summarize
from stackcost.result import RepetitionResult
from stackcost.store.database import Store
from tests.conftest import tiny_cell

SAMPLES = 500  # iterations per repetition: plenty for a pooled test to be overconfident
LATENCY = ["--threshold-metric", "latency=0.05"]  # the example in docs/guides/regressions.md


def repetition(i: int, factor: float, status: str, rng: np.random.Generator) -> RepetitionResult:
    """~1 ms iterations at 2% CV, the whole process `factor` slower."""
    samples = [int(1e6 * factor * x) for x in rng.lognormal(0, 0.02, SAMPLES)]
    rep = RepetitionResult(
        status=status,
        repetition=i,
        stats=summarize(samples),
        samples_ns=samples,
        throughput=2e3 / factor,
    )
    if status == "unstable":
        rep.reason = "stopped by max_time; CI of median +/-2.1%"
    elif status == "disturbed":
        rep.disturbance = Disturbance(
            others_cores=0.8, own_cores=1.0, window_s=1.0, threshold_cores=0.3, disturbed=True
        )
        rep.reason = rep.disturbance.reason()
    return rep


def store_run(db: Path, factors: list[float], statuses: list[str] | None = None) -> str:
    """One run of one cell, a repetition per factor; every repetition ok unless told."""
    rng = np.random.default_rng(round(sum(factors) * 1000))
    statuses = statuses or ["ok"] * len(factors)
    with Store(db) as store:
        run_id = store.create_run({}, {})
        cell_id = store.add_cell(run_id, tiny_cell("eager"))
        for i, (factor, status) in enumerate(zip(factors, statuses, strict=True)):
            store.add_repetition(cell_id, repetition(i, factor, status, rng))
        store.finish_run(run_id)
    return run_id


def compare_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    md = tmp_path / "comment.md"
    argv = ["compare", str(tmp_path / "k.db"), str(tmp_path / "k2.db"), "--markdown", str(md)]
    code = main([*argv, *LATENCY])
    # Whitespace flattened: the table's caption wraps at the console's width.
    return code, " ".join(capsys.readouterr().out.split()), md.read_text(encoding="utf-8")


def json_of(tmp_path: Path) -> dict:
    db, db2 = tmp_path / "k.db", tmp_path / "k2.db"
    cmp = compare_sides(load_side(str(db), db), load_side(str(db2), db2), {"latency": 0.05})
    return json.loads(as_json(cmp, {"latency": 0.05}, 0.05))


def test_two_repetitions_a_side_with_a_large_pooled_shift_do_not_regress(tmp_path, capsys):
    # The case: the same code twice, each process a little off.
    store_run(tmp_path / "k.db", [1.00, 0.99])
    store_run(tmp_path / "k2.db", [1.06, 1.07])
    code, out, md = compare_cli(tmp_path, capsys)
    assert code == 0, out
    assert "too few repetitions" in out and "--repeats 3 or more" in out
    assert "regressed" not in out
    assert (
        md.startswith("✅")
        and "too few repetitions (2 vs 2 repetitions; run with --repeats 3 or more)" in md
    )
    assert "> ⚠️ 1 cell(s) changed beyond the threshold" in md

    payload = json_of(tmp_path)
    assert payload["failed"] is False and payload["min_repetitions"] == 3
    (cell,) = payload["cells"]
    assert cell["verdict"] == "too few repetitions" and "--repeats 3" in cell["note"]
    latency = next(m for m in cell["metrics"] if m["metric"] == "latency")
    assert latency["p_samples"] < 1e-50  # what used to decide: pooled iterations
    assert latency["decided_by"] == "too few repetitions (2 vs 2)"
    assert latency["repetitions"] == [2, 2]
    assert any("--repeats 3 or more" in line for line in payload["advice"])


def test_three_repetitions_a_side_with_a_real_shift_regress(tmp_path, capsys):
    store_run(tmp_path / "k.db", [1.00, 0.99, 1.01])
    store_run(tmp_path / "k2.db", [1.70, 1.71, 1.69])
    code, out, md = compare_cli(tmp_path, capsys)
    assert code == 1, out
    assert "regressed: " in out and md.startswith("❌")
    assert "too few" not in out and json_of(tmp_path)["cells"][0]["verdict"] == "regressed"


@pytest.mark.parametrize("status", ["unstable", "disturbed"])
def test_an_untrusted_base_is_marked_never_judged(tmp_path, capsys, status):
    store_run(tmp_path / "k.db", [1.00, 0.99, 1.01], ["ok", status, "ok"])
    store_run(tmp_path / "k2.db", [1.30, 1.31, 1.29])  # a real regression, but over what?
    code, out, md = compare_cli(tmp_path, capsys)
    assert code == 0, out
    assert "untrusted base" in out and "regressed" not in out
    assert "Measure the baseline again" in out
    assert f"untrusted base (base {status}: " in md and "⚠️" in md
    (cell,) = json_of(tmp_path)["cells"]
    assert cell["verdict"] == "untrusted base" and cell["note"].startswith(f"base {status}: ")
    assert cell["metrics"], "the numbers are still shown"


def test_a_disturbed_candidate_is_untrusted_not_failing(tmp_path, capsys):
    store_run(tmp_path / "k.db", [1.00, 0.99, 1.01])
    store_run(tmp_path / "k2.db", [1.70, 1.71, 1.69], ["disturbed"] * 3)
    code, out, md = compare_cli(tmp_path, capsys)
    assert code == 0, out
    assert "untrusted candidate" in out and "newly failing" not in out
    assert "Measure them again on a quiet machine" in out
    assert "(candidate disturbed: other processes used 0.80 cores" in md


def test_an_unstable_candidate_is_still_judged_and_marked(tmp_path, capsys):
    store_run(tmp_path / "k.db", [1.00, 0.99, 1.01])
    store_run(tmp_path / "k2.db", [1.70, 1.71, 1.69], ["unstable", "ok", "ok"])
    code, out, md = compare_cli(tmp_path, capsys)
    assert code == 1, out
    assert "regressed (candidate unstable: stopped by max_time" in md
