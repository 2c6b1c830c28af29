"""One Backend contract for every rung: the worker never asks which kind it holds.

An in-process backend (prepare + the engine's timed loop) and a native one (a C++ program
runs the loop) go through the same worker path, the same breakdown hook and the same
build hook; a backend's environment reaches the worker; a model a program has no C++
definition of is `unsupported`, with the reason saying so.
"""

from __future__ import annotations

import pytest

from stackcost import backends
from stackcost.backends.base import Backend, NoBreakdown, Prepared
from stackcost.backends.eager import EagerBackend
from stackcost.cell import Cell, ModelRef
from stackcost.execute.worker import run_task
from stackcost.measure.protocol import Protocol
from stackcost.result import MEASURED_STATUSES
from stackcost.scenarios.task import RepetitionTask
from tests.conftest import cached_build

QUICK = Protocol(min_time_s=0.02, min_iters=3, max_time_s=1, warmup_max_time_s=0.5)
MNIST = ModelRef(name="mnist-cnn", num_classes=10, in_channels=1)


class ContractBackend(Backend):
    """Eager behind the contract's hooks: its own environment, its own breakdown."""

    name = "contract"
    description = "eager, with an environment and a breakdown of its own"
    prepared = 0

    def environment(self, cell):
        return {"STACKCOST_CONTRACT_FLAG": "on", "OMP_NUM_THREADS": "99"}

    def prepare(self, model, example, cell, ctx):
        ContractBackend.prepared += 1
        inner = EagerBackend().prepare(model, example, cell, ctx)
        return Prepared(inner.step, {"variant": "contract"})

    def breakdown(self, run, cell, iters):
        assert run.prepared is not None and run.answer is None
        raise NoBreakdown(f"{self.name} keeps its profile to itself ({iters} iters)")


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(backends.REGISTRY, "contract", f"{__name__}:ContractBackend")


def task(tmp_path, backend: str, model: ModelRef = MNIST, **kw) -> RepetitionTask:
    sizes = {"resolution": 28} if model is MNIST else {"seq_len": 8}
    cell = Cell(model=model, backend=backend, batch_size=1, sizes=sizes, threads=1)
    return RepetitionTask(cell=cell, protocol=QUICK, workdir=str(tmp_path), **kw)


def test_environment_reaches_the_task_and_thread_pins_win(registered, tmp_path):
    env = task(tmp_path, "contract").thread_env()
    assert env["STACKCOST_CONTRACT_FLAG"] == "on"
    assert env["OMP_NUM_THREADS"] == "1"  # the cell's threads, whatever the backend says
    assert "STACKCOST_CONTRACT_FLAG" not in task(tmp_path, "eager").thread_env()


def test_in_process_backend_runs_through_the_contract(registered, tmp_path, monkeypatch):
    monkeypatch.setenv("STACKCOST_CONTRACT_FLAG", "on")  # as the executor would set it
    ContractBackend.prepared = 0
    result = run_task(task(tmp_path, "contract", profile=True))
    assert result.status in MEASURED_STATUSES, (result.reason, result.log_tail)
    assert ContractBackend.prepared == 1 and result.verification.ok
    assert result.details["variant"] == "contract" and result.details["torch_threads"] == 1
    assert result.details["thread_env"]["STACKCOST_CONTRACT_FLAG"] == "on"  # recorded
    assert result.memory.method.startswith(("VmHWM after reset", "ru_maxrss"))
    assert result.breakdown is None
    assert "no breakdown: contract keeps its profile to itself (10 iters)" in result.profile_notes


def test_a_backend_without_a_program_has_nothing_to_build():
    assert EagerBackend().build() is None


def test_libtorch_refuses_a_model_without_a_cpp_definition(tmp_path):
    # Decided before the model is built: a 110M-parameter BERT is never constructed.
    result = run_task(task(tmp_path, "libtorch", ModelRef(name="bert-base")))
    assert result.status == "unsupported"
    assert result.reason.startswith("no C++ definition of bert-base")
    assert result.phases.build_s is None or result.phases.build_s == 0


def test_the_table_decides_what_the_programs_define():
    from stackcost.native import definition

    cell = Cell(model=MNIST, backend="onednn", sizes={"resolution": 28})
    assert definition(cell) == {"family": "mnist-cnn"}
    assert backends.load_backend("onednn").why_not(cell) is None
    user = cell.model_copy(update={"model": ModelRef(name="tests.factories:resnet18")})
    assert backends.load_backend("onednn").why_not(user).startswith("no C++ definition of")
    # A traced graph needs no definition.
    assert backends.load_backend("torchscript-cpp").why_not(user) is None


@pytest.mark.slow
def test_native_backend_runs_through_the_same_worker_path(tmp_path, native_cache):
    # The session's build (tests/conftest.py), which the native tests share: built by name.
    cached_build("libtorch", native_cache)
    result = run_task(task(tmp_path, "libtorch", profile=True))
    assert result.status in MEASURED_STATUSES, (result.reason, result.log_tail)
    assert result.verification.ok and result.details["kind"] == "nn"
    assert result.memory.method.startswith("VmHWM of the C++ process")
    assert result.breakdown is not None and "Kineto" in result.breakdown.method
    assert "OMP_NUM_THREADS" in result.details["thread_env"]
