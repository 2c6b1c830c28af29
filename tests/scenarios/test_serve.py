"""The serve scenario end to end: a worker verifies the rung, starts its batching engine
and sweeps request rates; the sweep is stored and shown; refusals name their value."""

from __future__ import annotations

from pathlib import Path

from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from tests.test_cli import run_cli

SERVE = [
    "run", "llama-tiny", "--scenario", "serve", "--prompt-len", "8", "--new-tokens", "4",
    "--serve-rates", "1", "--serve-time", "0.4s", "--serve-budget", "60s", "--quiet",
]  # fmt: skip


def test_serve_sweeps_eager_through_continuous_batching(tmp_path: Path, capsys) -> None:
    db = tmp_path / "s.db"
    code, out, err = run_cli(capsys, *SERVE, "--backends", "eager,torchscript", "--db", str(db))
    assert code == 0, err
    assert "one at a time" in out and "max throughput" in out
    assert "highest rate within the SLO" in out and "serve has no engine for torchscript" in out
    with Store(db, read_only=True) as store:
        result = RunResult.from_store(store, store.run_ids()[-1])
    (eager,) = [c for c in result.cells() if c.cell.backend == "eager"]
    assert eager.cell.serve is not None and eager.cell.serve.ttft_bound_ms == 2000.0
    rep = eager.repetitions[-1]
    assert rep.status == "ok", rep.reason
    assert rep.verification is not None and rep.verification.ok
    sweep = rep.serving
    assert sweep is not None and "ContinuousBatchingManager" in sweep.engine
    assert [f.process for f in sweep.rates] == ["sequential", "burst", "poisson"]
    single, burst, middle = sweep.rates
    assert single.in_flight_peak == 1 and burst.in_flight_peak > 1
    for fig in sweep.rates:
        assert fig.completed == fig.sent > 0 and not fig.errors, fig
        assert fig.ttft_ms.p50 and fig.ttft_ms.p50 <= fig.ttft_ms.p99
        assert fig.tpot_ms.count == fig.completed  # 4 tokens: every request has a TPOT
        assert fig.goodput_rps is not None
    assert single.request_rps < middle.target_rps < burst.request_rps
    # The engine reported its running batch while all were in flight.
    assert max(s[2] or 0 for s in burst.occupancy) > 1
    assert sweep.engine_agreement is not None and 0.0 <= sweep.engine_agreement <= 1.0
    code, md, err = run_cli(capsys, "report", "--db", str(db), "--format", "md")
    assert code == 0, err
    assert "| eager | one at a time |" in md and "highest rate within the SLO: eager" in md
