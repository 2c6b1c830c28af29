"""advise end to end on a tiny model: the phases, the stored answer, the budget, and a
search asked again that measures nothing twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stackcost.advise.constraints import Constraints
from stackcost.api.advise import advise, search_of
from stackcost.errors import SpecError
from stackcost.measure.protocol import Protocol

QUICK = Protocol(min_time_s=0.05, max_time_s=0.3, warmup_max_time_s=0.2, target_ci=0.2)


def tiny(model="mlp", **fields):
    fields = {
        "backends": ["onnxruntime"],
        "precisions": ["fp32"],
        "batch_sizes": [1, 2],
        "threads": [1],
        "sizes": {"resolution": [4]},
        "screen_protocol": QUICK,
        "final_protocol": QUICK,
        "final_repeats": 3,  # two processes are `unstable` at a 3% difference (t = 12.7)
        "budget_s": 600,
        **fields,
    }
    return search_of(model, **fields)


def count(db, table):
    return sqlite3.connect(db).execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_close_finalists_are_decided_side_by_side_and_asked_again_nothing_is_measured(tmp_path):
    db = tmp_path / "a.db"
    # A threshold of 50% makes the two finalists "too close": they go side by side.
    # A call of microseconds: its warm-up gets a second to settle, or a noisy minute of the
    # machine leaves a finalist `unstable` and nothing to put side by side.
    settled = QUICK.model_copy(update={"warmup_max_time_s": 1.0})
    search = tiny(
        finalists=2, threshold=0.5, constraints=Constraints(latency_bound_ms=1000),
        final_protocol=settled,
    )  # fmt: skip
    lines: list[str] = []
    first = advise(search, db, on_phase=lines.append)
    assert first.recommended is not None and first.runner_up is not None, first.entries
    assert first.comparison is not None and first.runs["pair"] == [first.comparison.pair_id]
    assert "side by side" in first.decided_by, first.decided_by
    assert first.reproduce.startswith("stackcost run mlp --backends onnxruntime --precision fp32")
    kept = Path(first.artifact)  # the chosen cell's ONNX graph, kept beside the store
    assert kept.is_relative_to(tmp_path / "advise-artifacts") and (kept / "model.onnx").is_file()
    assert {e.label for e in first.entries} == {
        "onnxruntime fp32 b1 t1 resolution 4",
        "onnxruntime fp32 b2 t1 resolution 4",
    }
    assert any(line.startswith("feasibility: 2 of 2") for line in lines), lines
    measured = count(db, "repetitions")
    second = advise(search, db)
    assert count(db, "repetitions") == measured  # resumed: nothing measured twice
    assert count(db, "pairs") == 1  # the pair, as stored
    assert second.recommended.label == first.recommended.label
    assert count(db, "advice") == 2


def test_cells_no_rung_runs_are_out_before_anything_runs_and_the_budget_is_said(tmp_path):
    db = tmp_path / "b.db"
    # eager has no static int8: out at feasibility; a 1 s budget ends after the first group
    # (eager fp32, valid on every ISA), so the others are not tried whatever int8 does here.
    search = tiny(backends=["eager", "onnxruntime"], precisions=["fp32", "int8"], budget_s=1)
    answer = advise(search, db)
    feasibility = [e for e in answer.entries if e.phase == "feasibility"]
    assert feasibility and all(e.backend == "eager" for e in feasibility)
    assert answer.recommended is None
    assert answer.why_none.startswith("the budget ran out"), answer.why_none
    assert any("budget" in n for n in answer.not_tried), answer.not_tried


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"objective": "speed"}, "objective 'speed'"),
        ({"margin": 1.0}, "margin 1.0"),
        ({"finalists": 0}, "finalists 0"),
        ({"backends": []}, "no rung to search"),
        ({"batch_sizes": [0]}, "batch"),
    ],
)
def test_bad_searches_are_refused_before_anything_is_written(tmp_path, fields, needle):
    db = tmp_path / "c.db"
    with pytest.raises(SpecError, match=needle):
        advise(tiny(**fields), db)
    assert not db.exists()


@pytest.mark.whole_machine  # two-thread cells: a lane has one core
def test_every_cell_is_screened_estimated_or_skipped_with_its_reason(tmp_path):
    # Three batches at two thread counts: the ends at two threads first, the middle batch
    # by its estimate, one thread only where the two-thread sibling was kept.
    search = tiny(batch_sizes=[1, 2, 4], threads=[1, 2], margin=0.0, finalists=1)
    lines: list[str] = []
    answer = advise(search, tmp_path / "c.db", on_phase=lines.append)
    assert len(answer.entries) == 6 and not answer.not_tried
    by_label = {e.label.split(" resolution")[0]: e for e in answer.entries}
    assert set(by_label) == {f"onnxruntime fp32 b{b} t{t}" for b in (1, 2, 4) for t in (1, 2)}
    middle = by_label["onnxruntime fp32 b2 t2"]
    if middle.status == "estimated":  # pruned on its estimate: no process of its own
        assert middle.repetitions == 0 and middle.decision.startswith("pruned on an estimate")
    else:  # its estimate was kept, so it was screened
        assert middle.repetitions >= 1, middle
    for label in ("onnxruntime fp32 b2 t1", "onnxruntime fp32 b4 t1"):
        e = by_label[label]
        assert e.status != "skipped" or e.decision.startswith("not screened: at t2"), e
    assert any(line.startswith("screening, middles: ") for line in lines), lines
    assert any(line.startswith("screening, fewer threads: ") for line in lines), lines


def test_a_search_killed_mid_way_resumes_without_measuring_anything_twice(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    db = tmp_path / "k.db"
    argv = [
        sys.executable, "-m", "stackcost.cli", "advise", "mlp", "--backends", "onnxruntime",
        "--precision", "fp32", "--batch-size", "1,2,4", "--threads", "1", "--resolution", "4",
        "--finalists", "1", "--budget", "10m", "--db", str(db),
    ]  # fmt: skip
    child = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert child.stderr is not None
    for line in child.stderr:  # killed as its finalist starts: the screening is stored
        if line.startswith("final 1 of 1"):
            os.killpg(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=120)
    assert child.returncode == -signal.SIGKILL
    screened = count(db, "repetitions")
    assert screened >= 2 and count(db, "advice") == 0
    resumed = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "screening, coarse: 2 cells" in resumed.stderr
    rows = sqlite3.connect(db).execute(
        "SELECT c.run_id, c.cell_key, r.repetition, count(*) FROM repetitions r "
        "JOIN cells c ON c.id = r.cell_id GROUP BY 1, 2, 3 HAVING count(*) > 1"
    )
    assert rows.fetchall() == []  # no repetition of a run was measured twice
    measured = count(db, "repetitions")
    md = tmp_path / "answer.md"
    again = subprocess.run(
        [*argv, "--markdown", str(md)], capture_output=True, text=True, timeout=300
    )
    answers = sqlite3.connect(db).execute("SELECT recommended FROM advice").fetchall()
    assert again.returncode == 0 and len(answers) == 2 and answers[0] == answers[1]
    assert count(db, "repetitions") == measured  # asked again: the same answer, as stored
    # The markdown links its Pareto figure, written beside it; the report writes it too.
    assert "](answer-pareto.png)" in md.read_text()
    assert (tmp_path / "answer-pareto.png").stat().st_size > 1000
    from stackcost.cli import main

    figs = tmp_path / "figs"
    report = ["report", "--advice", "latest", "--db", str(db), "-o", str(tmp_path / "r.html")]
    assert main([*report, "--figures", str(figs)]) == 0
    assert (figs / "advise_pareto-mlp.png").exists()


def test_a_decoder_is_advised_on_its_tokens_under_ttft_and_tpot_bounds(tmp_path):
    fields = {
        "model": "llama-tiny", "mode": "generate", "backends": ["eager"], "precisions": ["fp32", "w8"],
        "sizes": {"prompt_len": [8], "new_tokens": [4]}, "batch_sizes": [1],
    }  # fmt: skip
    loose = Constraints(latency_bound_ms=10_000, ttft_bound_ms=10_000)
    answer = advise(tiny(**fields, constraints=loose), tmp_path / "d.db")
    assert answer.mode == "generate" and answer.recommended is not None, answer.why_none
    assert answer.recommended.ttft_ms is not None and answer.recommended.ttft_ms > 0
    assert answer.reproduce.startswith(
        "stackcost run llama-tiny --scenario generate --backends eager"
    )
    assert answer.constraints_words.startswith("TPOT p99 ≤ 10000 ms, TTFT ≤ 10000 ms")
    assert {e.precision for e in answer.entries} == {"fp32", "w8"}
    # A first token no rung can give that soon: every cell breaks the TTFT bound.
    tight = Constraints(ttft_bound_ms=0.001)
    none = advise(tiny(**fields, constraints=tight), tmp_path / "e.db")
    assert none.recommended is None
    assert all("TTFT" in e.decision for e in none.entries if e.phase == "screening"), none


def test_a_served_decoder_is_ranked_by_the_rate_it_holds_within_the_slo(tmp_path):
    from stackcost.cell import ServeConfig

    sweep = ServeConfig(rates=1, per_rate_s=0.5, budget_s=3.0)
    slo = Constraints(latency_bound_ms=10_000, ttft_bound_ms=10_000)
    search = tiny(
        "llama-tiny", mode="serve", backends=["eager", "onnxruntime"], precisions=["fp32"],
        batch_sizes=[1], sizes={"prompt_len": [8], "new_tokens": [4]}, constraints=slo,
        objective="throughput", screen_sweep=sweep, final_sweep=sweep, final_repeats=2,
        finalists=2, threshold=10.0,  # any two are close: each gets 2 more processes
    )  # fmt: skip
    answer = advise(search, tmp_path / "s.db")
    assert answer.mode == "serve" and answer.recommended is not None, answer.why_none
    measured = [e for e in answer.entries if e.phase in ("screening", "final")]
    assert {e.backend for e in measured} == {"eager", "onnxruntime"}
    for e in measured:  # each held some rate, its p99 TPOT and TTFT there within the SLO
        assert e.throughput and e.throughput > 0 and e.median_ms == 1000 / e.throughput
        assert e.tail_ms is not None and e.ttft_ms is not None
    # Close, they each got 2 more processes, pooled; still close, a tie by memory.
    assert answer.recommended.repetitions == answer.runner_up.repetitions == 4
    assert "take turns, process by process" in answer.decided_by
    assert answer.decided_by.endswith("then the smaller memory"), answer.decided_by
    assert answer.reproduce.startswith("stackcost run llama-tiny --scenario serve --backends ")
    assert "--tpot-bound 10000ms --ttft-bound 10000ms --serve-rates 1" in answer.reproduce
    assert answer.constraints_words == "TPOT p99 ≤ 10000 ms, TTFT p99 ≤ 10000 ms"
    # An SLO no engine can hold: no rate is held, and nothing is recommended.
    tight = Constraints(ttft_bound_ms=0.001)
    none = advise(search_of(**{**search.__dict__, "constraints": tight}), tmp_path / "t.db")
    assert none.recommended is None
    assert all("no rate held within the SLO" in e.decision for e in none.entries), none


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"objective": "latency"}, "--objective latency does not rank served engines"),
        ({"constraints": Constraints(percentile="p90")}, "serve judges its SLO at p99"),
        ({"constraints": Constraints(max_quality_loss=1)}, "serve runs fp32 engines"),
    ],
)
def test_a_served_search_refuses_what_it_cannot_rank(tmp_path, fields, needle):
    search = search_of("llama-tiny", mode="serve", backends=["eager"], **fields)
    with pytest.raises(SpecError, match=needle):
        advise(search, tmp_path / "r.db")
    assert not (tmp_path / "r.db").exists()


def test_a_zoo_models_recipe_weights_are_trained_before_the_search_and_its_budget(tmp_path):
    import time

    lines: list[str] = []
    search = tiny(
        constraints=Constraints(max_quality_loss=5), weights_dir=str(tmp_path / "w"),
        batch_sizes=[1], finalists=1,
    )  # fmt: skip
    start = time.monotonic()
    answer = advise(search, tmp_path / "q.db", on_phase=lines.append)
    elapsed = time.monotonic() - start
    trained = next(i for i, line in enumerate(lines) if line.startswith("training mlp on"))
    searched = next(i for i, line in enumerate(lines) if line.startswith("feasibility: "))
    assert trained < searched, lines
    assert list((tmp_path / "w").rglob("weights.pt"))
    assert elapsed - answer.wall_s > 0.5, (elapsed, answer.wall_s)  # training is not counted
