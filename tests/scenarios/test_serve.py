"""The serve scenario end to end: a worker verifies the rung, starts its batching engine
and sweeps request rates; the sweep is stored and shown; refusals name their value."""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
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


# -- nothing finished is lost: a sweep killed mid-way, then resumed ------------------------

# Four rates of 2 s: the kill lands inside the third, seconds after the second is stored.
KILLABLE = [
    "run", "llama-tiny", "--scenario", "serve", "--prompt-len", "8", "--new-tokens", "4",
    "--serve-rates", "2", "--serve-time", "2s", "--serve-budget", "120s", "--quiet",
    "--on-disturbed", "keep",
]  # fmt: skip


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def the_worker(pid: int) -> psutil.Process | None:
    """The repetition's worker under the CLI at `pid`: a cold one runs the worker module;
    a warm one is forked by the starter, and is the starter's child."""
    for proc in descendants(pid):
        try:
            line = " ".join(proc.cmdline())
            parent = " ".join(proc.parent().cmdline())
        except (psutil.NoSuchProcess, AttributeError):
            continue
        if "stackcost.execute.worker" in line or "warm_start" in parent:
            return proc
    return None


def kept_rates(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM progress").fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def sweep_killed_after_two_rates(
    db: Path, backend: str, victim: Callable[[int], psutil.Process | None], extra: list[str]
) -> None:
    """Run the serve CLI, kill `victim` once two rates are in the store, then resume."""
    argv = [sys.executable, "-m", "stackcost.cli", *KILLABLE, "--backends", backend, *extra]
    argv += ["--db", str(db)]
    cli = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while kept_rates(db) < 2:
        assert cli.poll() is None and time.monotonic() < deadline, cli.communicate()
        time.sleep(0.1)
    target = victim(cli.pid)
    assert target is not None, [p.cmdline() for p in descendants(cli.pid)]
    target.kill()
    _, err = cli.communicate(timeout=240)
    assert kept_rates(db) == 2, err
    (cell,) = stored(db).cells()
    (stopped,) = cell.repetitions
    assert not stopped.valid and stopped.details["rates_kept"] == 2, stopped.reason
    assert "2 finished rates kept in the store: --resume runs the rest" in stopped.reason
    with Store(db, read_only=True) as store:
        kept = store.progress(1, 0)
    assert [f.process for f in kept] == ["sequential", "burst"]

    done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    assert kept_rates(db) == 0  # the finished repetition holds them now
    with Store(db, read_only=True) as store:
        assert len(store.run_ids()) == 1  # resumed, not a run of its own
    (cell,) = stored(db).cells()
    rep = cell.repetitions[-1]
    assert rep.status in ("ok", "disturbed") and rep.serving is not None, rep.reason
    rates = rep.serving.rates
    assert [f.process for f in rates] == ["sequential", "burst", "poisson", "poisson"]
    assert rates[:2] == kept  # each once: the kept ones as they were, the rest run now
    assert all(f.completed > 0 for f in rates)


def test_a_sweep_whose_in_process_engine_is_killed_keeps_its_rates_and_resumes(
    tmp_path: Path,
) -> None:
    # The eager rung's engine runs inside the worker: killing it kills the worker.
    sweep_killed_after_two_rates(tmp_path / "s.db", "eager", the_worker, [])


@needs_llamacpp
@pytest.mark.skipif(shutil.which("llama-server") is None, reason="no llama-server on PATH")
def test_a_sweep_whose_llama_server_is_killed_keeps_its_rates_and_resumes(tmp_path: Path) -> None:
    def server(pid: int) -> psutil.Process | None:
        return next((p for p in descendants(pid) if p.name() == "llama-server"), None)

    sweep_killed_after_two_rates(tmp_path / "s.db", "llama.cpp", server, [])
