"""A killed run's scratch directory is removed by the next run; a live one's is kept."""

from __future__ import annotations

import os
import subprocess
import sys

from stackcost.execute import scratch


def test_dead_runs_directories_go_live_ones_stay(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    orphan = tmp_path / f"{scratch.PREFIX}{dead_pid}-abc"
    (orphan / "0-0").mkdir(parents=True)
    (orphan / "0-0" / "model.onnx").write_bytes(b"x" * 1024)
    mine = scratch.make(tmp_path)
    foreign = tmp_path / "stackcost-run-not-ours"
    foreign.mkdir()
    removed = scratch.clean_orphans(tmp_path)
    assert removed == [orphan] and not orphan.exists()
    assert mine.exists() and foreign.exists()
    assert mine.name.startswith(f"{scratch.PREFIX}{os.getpid()}-")
