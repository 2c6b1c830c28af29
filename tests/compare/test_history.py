"""`stackcost history` over a store of synthetic runs with a slowdown from the 8th run."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from stackcost.cli import main
from stackcost.compare.history import html, load_history, untrusted_summary
from stackcost.measure.stats import summarize
from stackcost.result import RepetitionResult
from stackcost.store.database import Store
from tests.conftest import tiny_cell


def fill(
    db, n_runs: int = 12, step_at: int = 7, eager: Mapping[int, tuple[str, float]] | None = None
) -> list[str]:
    """`eager` overrides eager's (status, level) in some runs."""
    rng = np.random.default_rng(0)
    commits = [f"{i:02d}" + "ab" * 19 for i in range(n_runs)]
    with Store(db) as store:
        for i, commit in enumerate(commits):
            env = {
                "project_git": {"commit": commit, "dirty": False},
                "versions": {"torch": f"2.{i}"},
            }
            run_id = store.create_run({}, env)
            for backend, slow in (("eager", i >= step_at), ("onnxruntime", False)):
                cell_id = store.add_cell(run_id, tiny_cell(backend))
                status, level = "ok", 1.3 if slow else 1.0
                if backend == "eager" and eager and i in eager:
                    status, level = eager[i]
                base = 1e6 * level * (1 + rng.normal(0, 0.01))
                samples = [int(base * (1 + rng.normal(0, 0.05))) for _ in range(50)]
                rep = RepetitionResult(
                    status=status,
                    reason="" if status == "ok" else f"{status}: synthetic",
                    stats=summarize(samples),
                    samples_ns=samples,
                    throughput=1.0,
                )
                store.add_repetition(cell_id, rep)
            store.finish_run(run_id)
    return commits


def test_history_finds_the_step_and_its_commit(tmp_path, capsys):
    db = tmp_path / "h.db"
    commits = fill(db)
    series = {s.cell.backend: s for s in load_history(db, "latency")}
    assert [st.index for st in series["eager"].regressions] == [7]
    assert series["eager"].points[7].label == commits[7][:8]
    assert series["onnxruntime"].steps == []

    html, png = tmp_path / "h.html", tmp_path / "h.png"
    argv = ["history", "--metric", "latency", "--db", str(db), "--backend", "eager"]
    assert main([*argv, "-o", str(html), "--figure", str(png)]) == 0
    out = capsys.readouterr().out
    assert "regression" in out and commits[7][:8] in out
    assert html.read_text().startswith("<!doctype html>") and png.stat().st_size > 1000
    assert main([*argv, "--label", "version:torch"]) == 0
    assert "2.7" in capsys.readouterr().out


def test_history_usage_errors(tmp_path):
    assert main(["history", "--db", str(tmp_path / "none.db")]) == 2
    db = tmp_path / "h.db"
    fill(db, n_runs=3)
    assert main(["history", "--db", str(db), "--model", "resnet18"]) == 2


def test_untrusted_points_are_marked_and_decide_no_change_point(tmp_path):
    db = tmp_path / "h.db"
    # Run 3 disturbed (a 2x outlier), run 6 unstable and already slow: the step may
    # start there, but only ok points place it.
    commits = fill(db, eager={3: ("disturbed", 2.0), 6: ("unstable", 1.3)})
    eager = next(s for s in load_history(db, "latency") if s.cell.backend == "eager")
    assert len(eager.points) == 12  # the disturbed point is kept, no longer dropped
    assert [(p.label, p.status) for p in eager.untrusted] == [
        (commits[3][:8], "disturbed"),
        (commits[6][:8], "unstable"),
    ]
    assert eager.points[3].reason == "disturbed: synthetic"
    (step,) = eager.regressions
    assert step.index == 7 and eager.points[step.index].trusted
    assert step.before < 1.1  # the disturbed 2x outlier is not in the baseline level
    assert [p.label for p in eager.untrusted_before(step)] == [commits[6][:8]]
    (line,) = untrusted_summary([eager])
    assert "2 of 12 points untrusted (1 disturbed, 1 unstable)" in line
    page = html([eager], "latency")
    assert "Untrusted points" in page and f"{commits[6][:8]} (unstable)" in page
