"""The serve scenario end to end: a worker verifies the rung, starts its batching engine
and sweeps request rates; the sweep is stored and shown; refusals name their value."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from tests.test_cli import run_cli

SERVE = [
    "run", "llama-tiny", "--scenario", "serve", "--prompt-len", "8", "--new-tokens", "4",
    "--serve-rates", "1", "--serve-time", "0.25s", "--serve-budget", "60s", "--quiet",
    "--on-disturbed", "keep",
]  # fmt: skip
# --on-disturbed keep: the checks below take a disturbed sweep as they take a clean one, so a
# busy neighbour must not rerun a cell (each costs seconds of start-up and verification).
# 0.25 s a rate: each rate still answers >= 4 requests.


def stored(db: Path) -> RunResult:
    with Store(db, read_only=True) as store:
        return RunResult.from_store(store, store.run_ids()[-1])


def check_sweep(result: RunResult, backend: str, engine: str, counts: bool = True) -> None:
    """The cell's sweep: verified, its three rates each answered in full, in order."""
    (cell,) = [c for c in result.cells() if c.cell.backend == backend]
    assert cell.cell.serve is not None and cell.cell.serve.ttft_bound_ms == 2000.0
    rep = cell.repetitions[-1]
    assert rep.status in ("ok", "disturbed"), rep.reason
    assert rep.verification is not None and rep.verification.ok
    sweep = rep.serving
    assert sweep is not None and engine in sweep.engine
    assert [f.process for f in sweep.rates] == ["sequential", "burst", "poisson"]
    single, burst, middle = sweep.rates
    assert single.in_flight_peak == 1 and burst.in_flight_peak > 1
    for fig in sweep.rates:
        # Only the time limit may leave requests unanswered (a slow engine's drain is cut).
        assert fig.completed > 0 and fig.sent > 0, fig
        assert all(e.startswith("time limit") for e in fig.errors), fig.errors
        assert fig.ttft_ms.p50 and fig.ttft_ms.p50 <= fig.ttft_ms.p99
        assert fig.tpot_ms.count == fig.completed  # 4 tokens: every request has a TPOT
        assert fig.goodput_rps is not None
    assert 0 < middle.target_rps < max(single.request_rps, burst.request_rps)
    # The engine's own running count is sampled where it reports one. Not its size: a
    # burst of tiny requests can finish between two 50 ms samples (it did once in CI's
    # lanes); tests/serving/test_client.py checks the counts on a stub of known timing.
    running = [s[2] for s in burst.occupancy]
    assert running and all((r is not None) == counts for r in running), running
    assert sweep.engine_agreement is not None and 0.0 <= sweep.engine_agreement <= 1.0


def test_serve_sweeps_each_engines_own_batching(tmp_path: Path, capsys) -> None:
    db = tmp_path / "s.db"
    code, out, err = run_cli(
        capsys, *SERVE, "--backends", "eager,openvino,onnxruntime,torchscript", "--db", str(db)
    )
    assert code in (0, 1), err  # 1: a cell disturbed by the other lane's work
    assert "one at a time" in out and "max throughput" in out
    assert "highest rate within the SLO" in out and "torchscript: does not generate tokens" in out
    result = stored(db)
    check_sweep(result, "eager", "ContinuousBatchingManager")
    check_sweep(result, "openvino", "ContinuousBatchingPipeline")
    check_sweep(result, "onnxruntime", "onnxruntime-genai Engine", counts=False)
    code, md, err = run_cli(capsys, "report", "--db", str(db), "--format", "md")
    assert code == 0, err
    assert "one at a time |" in md and "highest rate within the SLO: " in md
    html = tmp_path / "r.html"
    code, _, err = run_cli(capsys, "report", "--db", str(db), "-o", str(html))
    assert code == 0, err
    page = html.read_text()
    assert 'id="serving"' in page and "latency against request rate" in page


needs_llamacpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed"
)


@needs_llamacpp
@pytest.mark.skipif(shutil.which("llama-server") is None, reason="no llama-server on PATH")
def test_serve_starts_llama_cpps_server_and_streams_over_http(tmp_path: Path, capsys) -> None:
    db = tmp_path / "s.db"
    code, _, err = run_cli(capsys, *SERVE, "--backends", "llama.cpp", "--db", str(db))
    assert code in (0, 1), err
    check_sweep(stored(db), "llama.cpp", "llama.cpp server")


@needs_llamacpp
def test_a_missing_llama_server_is_unavailable_with_how_to_build_it(tmp_path: Path, capsys) -> None:
    db = tmp_path / "s.db"
    missing = str(tmp_path / "no" / "llama-server")
    run_cli(
        capsys,
        *SERVE,
        "--backends",
        "llama.cpp",
        "-o",
        f"llama.cpp.server={missing}",
        "--db",
        str(db),
    )
    (cell,) = stored(db).cells()
    rep = cell.repetitions[-1]
    assert rep.status == "unavailable" and "cmake --build build --target llama-server" in rep.reason
