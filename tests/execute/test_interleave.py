"""`stackcost ab` end to end: a real interleaved A/B of a step with a busy-wait knob.

The candidate's workers get a longer busy-wait through --cand-env (no --inherit-env:
a side's variables are the point of the side); an A/A of the same step says it is an
A/A and does not regress; bad input is refused in one line before anything is written.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys

import pytest

from stackcost.cli import main
from stackcost.commands.ab import EXIT_UNDECIDED
from stackcost.execute.interleave import MIN_PAIRS
from stackcost.scenarios.task import OMP_BINDING
from tests.conftest import ROOT

BUSY = "tests.execute.fake_backends:BusyBackend"
FAST = ["--min-time", "0.05", "--max-time", "0.5", "--threads", "1", "--batch-size", "2"]


def ab(tmp_path, *extra: str) -> list[str]:
    return [
        "ab",
        "mlp",
        "--backends",
        BUSY,
        "--resolution",
        "4",
        *FAST,
        "--db",
        str(tmp_path / "ab.db"),
        "--quiet",
        *extra,
    ]


@pytest.fixture(autouse=True)
def importable_backend(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def test_a_slowed_candidate_regresses_and_both_runs_are_stored_as_a_pair(tmp_path, capsys):
    md, js = tmp_path / "pr.md", tmp_path / "ab.json"
    argv = ab(
        tmp_path,
        "--pacing",
        "processes",
        "--base",
        sys.executable,  # an interpreter side: the same venv, named explicitly
        "--base-env",
        "STACKCOST_TEST_BUSY_US=1000",
        "--cand-env",
        "STACKCOST_TEST_BUSY_US=8000",
        "--min-blocks",
        "2",
        "--max-blocks",
        "4",
        "--markdown",
        str(md),
        "--json",
        str(js),
    )
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "regressed: mlp" in out and "A/A" not in out
    verdict = json.loads(js.read_text())
    (cell,) = verdict["cells"]
    assert cell["verdict"] == "regressed"
    assert cell["result"]["ratio"] > 3  # 1 ms -> 8 ms of busy-wait, plus eager
    assert "Performance regression" in md.read_text()
    db = sqlite3.connect(tmp_path / "ab.db")
    base, cand = db.execute("SELECT base_run, cand_run FROM pairs").fetchone()
    envs = dict(db.execute("SELECT id, env_json FROM runs").fetchall())
    assert json.loads(envs[cand])["ab"]["env"] == {"STACKCOST_TEST_BUSY_US": "8000"}
    assert json.loads(envs[base])["worker_environ"]["STACKCOST_TEST_BUSY_US"] == "1000"
    # Each block: two repetitions a side, each its own process, stored in its side's run.
    # A disturbed try is stored beside its retry under the same repetition number.
    reps = db.execute(
        "SELECT c.run_id, COUNT(DISTINCT r.repetition) FROM repetitions r"
        " JOIN cells c ON r.cell_id = c.id GROUP BY c.run_id"
    ).fetchall()
    assert {n for _, n in reps} == {2 * verdict["blocks"]}


def test_bursts_in_warm_paired_workers_catch_a_slowed_candidate(tmp_path, capsys):
    js = tmp_path / "ab.json"
    argv = ab(tmp_path, "--base-env", "STACKCOST_TEST_BUSY_US=1000", "--cand-env")
    argv += ["STACKCOST_TEST_BUSY_US=3000", "--min-blocks", "2", "--max-blocks", "3"]
    code = main([*argv, "--block-time", "0.3", "--json", str(js)])
    out = capsys.readouterr().out
    assert code == 1, out
    verdict = json.loads(js.read_text())
    assert verdict["design"]["pacing"] == "bursts"
    (cell,) = verdict["cells"]
    assert cell["verdict"] == "regressed" and cell["design"] == "bursts"
    assert 2 < cell["result"]["ratio"] < 4  # 1 ms -> 3 ms of busy-wait, plus eager
    for block in cell["blocks"]:
        # Each block's estimate is the mean log ratio of its burst pairs, one per kept pair.
        assert len(block["base"]) == len(block["cand"]) >= MIN_PAIRS
        pairs = [math.log(c / b) for b, c in zip(block["base"], block["cand"], strict=True)]
        assert block["log_ratio"] == pytest.approx(sum(pairs) / len(pairs))
        assert block["first"] in ("base", "cand")  # the side started first, drawn per block
    # One worker a side per block, each one repetition in its side's run, paced in bursts.
    db = sqlite3.connect(tmp_path / "ab.db")
    rows = db.execute(
        "SELECT c.run_id, r.result_json FROM repetitions r JOIN cells c ON r.cell_id = c.id"
    ).fetchall()
    per_run = {run: 0 for run, _ in rows}
    for run, result_json in rows:
        per_run[run] += 1
        result = json.loads(result_json)
        assert result["status"] in ("ok", "unstable"), result["reason"]
        assert result["stop_reason"] == "paced" and result["verification"]["ok"]
        assert result["details"]["paced"]["bursts"] >= MIN_PAIRS
    assert sorted(per_run.values()) == [verdict["blocks"]] * 2


def test_a_cell_that_cannot_be_cut_into_bursts_is_measured_in_processes(tmp_path, capsys):
    js = tmp_path / "ab.json"
    argv = ab(tmp_path, "--min-blocks", "2", "--max-blocks", "2", "--json", str(js))
    argv[argv.index(BUSY)] = "tests.execute.fake_backends:WholeRepetitionBackend"
    assert main(argv) in (0, EXIT_UNDECIDED)
    (cell,) = json.loads(js.read_text())["cells"]
    assert cell["design"] == "processes"
    assert "measured in processes, not bursts: whole runs a whole" in cell["note"]
    assert "own program" in cell["note"]
    assert all(len(b["base"]) == 2 == len(b["cand"]) for b in cell["blocks"])  # ABBA/BAAB


def test_only_the_timed_loop_of_inference_and_plain_generation_are_paced():
    from stackcost.cell import Cell, ModelRef, ServeConfig
    from stackcost.execute.interleave import pacable
    from stackcost.scenarios.settings import LoadGenSettings

    cell = Cell(model=ModelRef(name="mlp"), backend="eager")
    assert pacable(cell)
    assert not pacable(cell.model_copy(update={"mode": "train"}))
    assert not pacable(cell.model_copy(update={"scenario": LoadGenSettings().config("server")}))
    generate = cell.model_copy(update={"mode": "generate"})
    assert pacable(generate)  # bursts of whole generations
    assert not pacable(generate.model_copy(update={"serve": ServeConfig()}))
    loadgen = LoadGenSettings().config("offline")
    assert not pacable(generate.model_copy(update={"scenario": loadgen}))


def test_an_aa_test_says_so_and_does_not_regress(tmp_path, capsys):
    code = main(ab(tmp_path, "--min-blocks", "2", "--max-blocks", "2"))
    out = capsys.readouterr().out
    # Two blocks may not decide an A/A: undecided (3) is allowed, a regression (1) is not.
    assert code in (0, EXIT_UNDECIDED), out
    assert out.count("no regression") + out.count("undecided:") == 1, out
    assert "A/A test" in out and "regressed" not in out.replace("`regressed`", "")


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--repeats", "3"], "--repeats 3"),
        (["--base", "/nonexistent/python"], "/nonexistent/python"),
        (["--cand", "git:"], "git:"),
        (["--cand-env", "1BAD=x"], "1BAD=x"),
        (["--cand-option", "nodot=1"], "nodot=1"),
        (["--min-blocks", "5", "--max-blocks", "3"], "--min-blocks 5"),
        (["--alpha", "1.5"], "--alpha"),
        (["--threshold", "-0.1"], "--threshold"),
        (["--on-undecided", "maybe"], "--on-undecided 'maybe'"),
        (["--pacing", "sideways"], "--pacing 'sideways'"),
        (["--block-time", "0"], "--block-time"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, extra, named):
    assert main(ab(tmp_path, *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stackcost: error:") and "\n" not in err and named in err
    assert not (tmp_path / "ab.db").exists()


def test_a_git_side_installs_that_commit_over_this_environment(tmp_path):
    import subprocess

    from stackcost.execute.sides import resolve

    repo = tmp_path / "proj"
    (repo / "abprobe").mkdir(parents=True)
    # An SPDX license string, as this project's: setuptools >= 77 builds it, not the 65
    # that `python -m venv` bundles with Python 3.11 (git sides of stackcost itself failed).
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "abprobe"\nversion = "0"\nlicense = "MIT"\n'
        '[tool.setuptools]\npackages = ["abprobe"]\n'
    )
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    for value in (1, 2):
        (repo / "abprobe" / "__init__.py").write_text(f"VALUE = {value}\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", f"v{value}"], check=True)
    side = resolve("base", "git:HEAD~1", [], [], repo=repo, cache=tmp_path / "cache")
    probe = "import abprobe, stackcost.execute.worker; print(abprobe.VALUE)"
    out = subprocess.run([side.python, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "1", out.stderr  # that commit, and this env's stackcost
    assert side.origin.startswith("git:HEAD~1 (")
    # Built once per commit: the second resolve reuses the venv.
    again = resolve("base", "git:HEAD~1", [], [], repo=repo, cache=tmp_path / "cache")
    assert again.python == side.python


@pytest.mark.whole_machine  # a 2-thread cell, its OpenMP threads bound as ab binds them
def test_a_bound_worker_prepares_on_every_core_and_is_timed_on_its_bound_one(tmp_path, capsys):
    from stackcost.env import cores

    if cores() < 2:
        pytest.skip("needs 2 CPUs for a 2-thread cell")
    argv = ["ab", "mlp", "--backends", "eager", "--resolution", "4", *FAST, "--threads", "2"]
    argv += ["--db", str(tmp_path / "ab.db"), "--quiet", "--min-blocks", "2", "--max-blocks"]
    argv += ["2", "--block-time", "0.3"]
    main(argv)
    capsys.readouterr()
    db = sqlite3.connect(tmp_path / "ab.db")
    details = [
        json.loads(r)["details"] for (r,) in db.execute("SELECT result_json FROM repetitions")
    ]
    assert len(details) == 4  # two blocks, a worker a side in each
    everywhere = sorted(os.sched_getaffinity(0))
    probe = "import os, torch; print(sorted(os.sched_getaffinity(0)))"
    env = {**os.environ, **OMP_BINDING}
    libgomps = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True)
    bound = json.loads(libgomps.stdout)  # where libgomp puts a bound process's main thread
    for d in details:
        assert d["thread_env"]["OMP_PROC_BIND"] == "close"
        # libgomp bound the main thread to its first place (a core) as torch loaded; the
        # worker spread it again for the imports and the build, and put it back before the
        # cold call.
        assert d["main_thread_cpus"] == {"prepare": everywhere, "timed": bound}, d


def test_a_failed_git_side_install_names_pips_error_not_its_closing_hint():
    from stackcost.execute.sides import _install_error

    stderr = """  error: subprocess-exited-with-error
      ValueError: invalid pyproject.toml config: `project.license`.
      configuration error: `project.license` must be valid exactly by one definition
  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed
hint: See above for details.
"""
    assert _install_error(stderr).startswith("ValueError: invalid pyproject.toml")
    assert _install_error("ERROR: No matching distribution\n") == "ERROR: No matching distribution"
    assert _install_error("just this\n") == "just this"
    assert _install_error("") == "no output"


def test_a_blocks_shared_cores_spare_a_bound_cell_and_one_as_wide_as_the_host(monkeypatch):
    from stackcost.cell import Cell, ModelRef
    from stackcost.execute import interleave

    monkeypatch.setattr(interleave, "host_cpus", lambda: [0, 1, 2, 3])
    cell = Cell(model=ModelRef(name="mlp"), backend="eager", threads=2)
    assert interleave.shared_cores(cell, True, 0, 1) is None  # OpenMP binds its 2 threads
    drawn = interleave.shared_cores(cell, False, 0, 1)
    assert drawn is not None and len(drawn) == 2 and drawn <= {0, 1, 2, 3}
    assert interleave.shared_cores(cell, False, 0, 1) == drawn  # the block's seed draws them
    one = cell.model_copy(update={"threads": 1})
    assert len(interleave.shared_cores(one, True, 0, 1) or ()) == 1  # 1 thread: never bound
    wide = cell.model_copy(update={"threads": 4})
    assert interleave.shared_cores(wide, False, 0, 1) is None
