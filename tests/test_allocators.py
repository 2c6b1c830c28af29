"""The workers' allocator: one table, checked where it enters, recorded with every
repetition, and changing where buffers live but never a value."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from stackcost.allocators import ALLOCATORS, DEFAULT_ALLOCATOR, GATE_ALLOCATOR, allocator_problem
from stackcost.cli import main
from stackcost.runspec.run import model_ref, validate
from stackcost.scenarios.task import RepetitionTask
from tests.conftest import tiny_cell

QUICK = ["--min-time", "0.01", "--max-time", "0.2", "--threads", "1", "--quiet"]


def test_the_table_names_the_defaults_and_steady_fixes_both_thresholds():
    assert DEFAULT_ALLOCATOR == "glibc" and not ALLOCATORS["glibc"].env
    assert set(ALLOCATORS["steady"].env) == {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}
    assert GATE_ALLOCATOR in ALLOCATORS
    assert allocator_problem("steady") is None
    assert "allowed: glibc, steady, huge" in (allocator_problem("jemalloc") or "")
    # huge is steady's thresholds plus glibc's own tunable, nothing else
    assert ALLOCATORS["huge"].env == {
        **ALLOCATORS["steady"].env,
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
    }


def test_a_task_puts_its_allocator_in_the_workers_environment_under_the_thread_settings():
    task = RepetitionTask(cell=tiny_cell(), workdir="w", allocator="steady")
    env = task.thread_env()
    assert env["MALLOC_MMAP_THRESHOLD_"] == ALLOCATORS["steady"].env["MALLOC_MMAP_THRESHOLD_"]
    assert (
        "MALLOC_MMAP_THRESHOLD_" not in RepetitionTask(cell=tiny_cell(), workdir="w").thread_env()
    )


def test_the_default_allocator_leaves_a_specs_identity_as_it_was():
    def spec(**fields):
        return validate({"models": [model_ref("mlp")], "backends": ["eager"], **fields})

    plain = spec()
    assert spec(allocator="glibc").digest() == plain.digest()
    assert spec(allocator="steady").digest() != plain.digest()


def test_an_unknown_allocator_is_one_line_exit_2_and_nothing_written(capsys, tmp_path):
    db = tmp_path / "s.db"
    code = main(["run", "mlp", "--backends", "eager", "--allocator", "tcmalloc", "--db", str(db)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert "allocator 'tcmalloc' is not known (allowed: glibc, steady, huge)" in err
    assert not db.exists()


# A conv stack whose activations cross glibc's thresholds: the allocator decides where
# they live; the values must not move.
PROGRAM = """
import hashlib, torch
torch.manual_seed(0)
net = torch.nn.Sequential(*[torch.nn.Conv2d(8, 8, 3, padding=1) for _ in range(4)]).eval()
x = torch.randn(4, 8, 64, 64)
with torch.inference_mode():
    for _ in range(3):
        y = net(x)
print(hashlib.sha256(y.numpy().tobytes()).hexdigest())
"""


def test_every_allocator_computes_the_same_bits():
    digests = {}
    for name, allocator in ALLOCATORS.items():
        env = {**os.environ, "OMP_NUM_THREADS": "1", **allocator.env}
        out = subprocess.run(
            [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True
        )
        digests[name] = out.stdout.strip()
    assert len(set(digests.values())) == 1, digests


HELD = """
import torch
from stackcost.measure.memory import anon_huge_bytes
x = torch.ones(4 << 20)  # 16 MiB: from the heap under steady's threshold
print(anon_huge_bytes())
"""


def test_huge_puts_a_workers_heap_on_huge_pages_where_the_kernel_allows():
    from pathlib import Path

    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[never]" in mode.read_text():
        pytest.skip("this kernel gives no transparent huge pages")
    held = {}
    for name in ("steady", "huge"):
        env = {**os.environ, "OMP_NUM_THREADS": "1", **ALLOCATORS[name].env}
        out = subprocess.run(
            [sys.executable, "-c", HELD], env=env, capture_output=True, text=True, check=True
        )
        held[name] = int(out.stdout.strip())
    assert held["huge"] >= 8 << 20, held  # most of the 16 MiB on 2 MiB pages
    if "[madvise]" in mode.read_text():  # only what asks gets them
        assert held["steady"] < held["huge"], held


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
def test_a_run_records_its_allocator_and_page_faults_and_still_verifies(
    capsys, tmp_path, allocator
):
    db = tmp_path / "s.db"
    argv = ["run", "mlp", "--backends", "eager,onnxruntime", "--allocator", allocator]
    assert main([*argv, *QUICK, "--db", str(db)]) == 0
    capsys.readouterr()
    rows = sqlite3.connect(db).execute("SELECT status, result_json FROM repetitions").fetchall()
    # Verified (not wrong); a loaded machine may leave a 0.2 s loop short of its CI target.
    assert [status in ("ok", "unstable") for status, _ in rows] == [True, True], rows
    for _, blob in rows:
        details = json.loads(blob)["details"]
        env = details["thread_env"]
        assert all(env.get(k) == v for k, v in ALLOCATORS[allocator].env.items()), env
        assert details["page_faults_per_step"] >= 0
        assert details["anon_huge_pages_mib"] >= 0
