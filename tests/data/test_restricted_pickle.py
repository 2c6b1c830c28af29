"""CIFAR-10's pickles are read without running code: a crafted batch is refused before
its payload runs, and a global naming a missing module is refused in one line, not as an
import error. The real archive's shape (numpy arrays, bytes, lists) still reads
(tests/data/test_readers.py)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from stackcost.data import DatasetCorrupt
from stackcost.data.cifar10 import read_cifar10
from tests.test_refusals_files import refused


class RunsAShellCommand:
    """Unpickled by pickle.load, this calls os.system(command)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def crafted(root: Path, marker: Path) -> None:
    batch = {b"data": RunsAShellCommand(f"touch {marker}"), b"labels": [0]}
    (root / "cifar-10-batches-py").mkdir(parents=True)
    for name in ("data_batch_1", "test_batch"):
        (root / "cifar-10-batches-py" / name).write_bytes(pickle.dumps(batch, protocol=2))


def test_a_crafted_batch_does_not_run_its_payload(tmp_path):
    marker = tmp_path / "payload-ran"
    crafted(tmp_path, marker)
    with pytest.raises(DatasetCorrupt, match=r"it names posix\.system, which this format"):
        read_cifar10(tmp_path, "test")
    assert not marker.exists()


def test_a_crafted_batch_given_to_train_is_one_line_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "payload-ran"
    crafted(tmp_path / "data", marker)
    (tmp_path / "out").mkdir()
    argv = ["train", "mlp", "--dataset", "cifar10", "--data-dir", str(tmp_path / "data")]
    argv += ["--limit", "8", "--db", str(tmp_path / "out" / "s.db")]
    err = refused(argv, capsys, tmp_path / "out")
    assert "not a CIFAR pickle (it names posix.system" in err, err
    assert not marker.exists()


def test_a_global_from_a_missing_module_is_refused_not_imported(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    # protocol 0: GLOBAL 'no_such_module_xyz thing', called with no arguments
    (root / "test_batch").write_bytes(b"cno_such_module_xyz\nthing\n(tR.")
    with pytest.raises(DatasetCorrupt, match=r"no_such_module_xyz\.thing, which this format"):
        read_cifar10(tmp_path, "test")
