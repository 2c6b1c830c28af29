"""The one worker: its preamble, the scenario registry it reads, and its entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stackcost.cell import TrainConfig
from stackcost.execute.worker import run_task
from stackcost.result import RepetitionResult
from stackcost.scenarios.loadgen import LoadGen
from stackcost.scenarios.registry import SCENARIOS, scenario_of
from stackcost.scenarios.settings import KINDS, LoadGenSettings
from stackcost.scenarios.task import RepetitionTask, TrainTask, read_task
from stackcost.scenarios.timed_loop import TimedLoop
from stackcost.scenarios.train import Training
from tests.conftest import ROOT, tiny_cell, tiny_task


def test_every_cell_finds_its_scenario_in_the_registry() -> None:
    assert isinstance(scenario_of(tiny_cell()), TimedLoop)
    for name in KINDS:
        held = scenario_of(tiny_cell(scenario=LoadGenSettings().config(name)))
        assert isinstance(held, LoadGen) and held.name == name
    train = tiny_cell(mode="train", train=TrainConfig(dataset="digits", epochs=1))
    assert isinstance(scenario_of(train), Training)
    assert all(name == s.name for name, s in SCENARIOS.items())


def test_a_task_file_reads_back_as_the_task_it_was(tmp_path: Path) -> None:
    infer = tiny_task(tmp_path)
    assert type(read_task(infer.model_dump_json())) is RepetitionTask
    train = TrainTask(
        cell=tiny_cell(mode="train", train=TrainConfig(dataset="digits", epochs=1)),
        workdir=str(tmp_path),
        weights_path="w.pt",
        weights_digest="0" * 16,
    )
    back = read_task(train.model_dump_json())
    assert type(back) is TrainTask and back.weights_path == "w.pt"
    assert train.worker == infer.worker == "stackcost.execute.worker"  # one entry point


def test_a_failure_after_the_build_keeps_the_weights_and_phases(tmp_path: Path) -> None:
    result = run_task(tiny_task(tmp_path, "tests.execute.fake_backends:RaiseBackend"))
    assert result.status == "failed" and "kernel not implemented" in result.reason
    assert result.weights_digest and result.phases.build_s is not None
    assert result.phases.total_s is not None and result.finished_at is not None
    assert result.stats is None and result.details == {}


def test_unsupported_is_decided_before_anything_is_built(tmp_path: Path) -> None:
    # The fake backend's capabilities are the default's: fp32 only.
    result = run_task(
        tiny_task(tmp_path, "tests.execute.fake_backends:RaiseBackend", precision="bf16")
    )
    assert result.status == "unsupported" and "bf16" in result.reason
    assert result.weights_digest is None and result.phases.build_s is None
    assert result.phases.import_s is not None


def test_the_worker_module_runs_a_task_file(tmp_path: Path) -> None:
    task, out = tmp_path / "task.json", tmp_path / "result.json"
    task.write_text(tiny_task(tmp_path).model_dump_json())
    subprocess.run(
        [sys.executable, "-m", "stackcost.execute.worker", str(task), str(out)],
        check=True,
        cwd=ROOT,
        timeout=300,
    )
    stored = RepetitionResult.model_validate_json(out.read_text())
    assert stored.status in ("ok", "unstable", "disturbed"), stored.reason
    assert stored.stats is not None and stored.verification is not None
