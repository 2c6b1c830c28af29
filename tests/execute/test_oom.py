"""An allocation failure, whatever raised it, is `oom` and prunes the larger batches."""

from __future__ import annotations

import pytest

from stackcost.execute.process import is_oom, reason_of
from stackcost.execute.runner import execute
from stackcost.result import headline
from stackcost.runspec.run import RunSpec, model_ref
from stackcost.store.database import Store
from tests.conftest import FAST


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError(),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"
        ),
        RuntimeError("stackcost_onednn: error: std::bad_alloc"),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    ],
)
def test_allocation_failures_of_every_origin_are_oom(exc):
    assert is_oom(exc)


def test_other_failures_are_not():
    assert not is_oom(RuntimeError("shape mismatch"))


def test_the_store_keeps_the_whole_reason_and_tables_its_headline():
    exc = RuntimeError(
        "cmake --build failed (exit 1):\nIn file x.cpp\nx.cpp:1: error: bad\nmake: Error 2"
    )
    reason = reason_of(exc)
    assert "In file x.cpp" in reason and "make: Error 2" in reason
    assert headline(reason) == "x.cpp:1: error: bad"


def test_an_allocator_failure_prunes_the_larger_batches(tmp_path, warm_executor):
    spec = RunSpec(
        models=[model_ref("mlp")],
        backends=["tests.execute.fake_backends:AllocFailBackend"],
        resolutions=[4],
        batch_sizes=[2, 4, 8, 16],
        protocol=FAST,
    )
    with Store(tmp_path / "s.db") as store:
        result = execute(spec, store, executor=warm_executor, on_disturbed="keep")
    status = {c.cell.batch_size: c.status for c in result.cells()}
    assert status[4] == "oom" and status[8] == status[16] == "skipped", status
    oom = next(c for c in result.cells() if c.cell.batch_size == 4)
    assert "[enforce fail at alloc_cpu.cpp:127]" in oom.reason  # whole, brackets included
