"""Shared fixtures: tiny cells and a fast protocol so the suite runs in minutes."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import pytest

from stackcost.backends.native import NativeBackend
from stackcost.cell import Cell
from stackcost.execute.local import LocalExecutor
from stackcost.execute.warm_start import StarterLost, WarmStarter
from stackcost.measure.protocol import Protocol
from stackcost.native.build import Build, ensure_built, toolchain_problem
from stackcost.runspec.run import model_ref
from stackcost.scenarios.task import RepetitionTask

ROOT = Path(__file__).resolve().parents[1]

FAST = Protocol(
    min_time_s=0.05, min_iters=5, max_time_s=0.5, warmup_max_time_s=0.3, check_interval_s=0.02
)


# A skip reason that says the test needs a GPU ("no CUDA device here", "needs a CUDA GPU").
_NEEDS_GPU = re.compile(r"\b(no|needs an?) CUDA\b", re.IGNORECASE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need a GPU carry the `gpu` marker, read off their skipif reason, so a GPU
    machine runs exactly them (`pytest -m gpu`, benchmarks/gpu/campaign.sh's tests part).
    In a lane (below), a test that needs the whole machine is skipped, saying where it runs."""
    lane = _lane()
    for item in items:
        if any(_NEEDS_GPU.search(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.gpu)
        if lane is not None and item.get_closest_marker("whole_machine"):
            item.add_marker(pytest.mark.skip(reason=WHOLE_MACHINE_SKIP))


# Lanes: `make test` runs the suite on every core at once (pytest-xdist, one worker per
# core), each worker pinned to a core of its own. A repetition forked from a lane inherits
# the pin, so its disturbance check counts that core alone (measure/counters.pinned_cpus),
# and the other lane's imports, exports and compiles on the other core never make it
# `disturbed`. Its repetitions hold that core, not the whole machine (execute/machine_lock.py),
# so the lanes measure beside each other. A lane has one core, so its runs default to 1
# thread and refuse 2. Tests that need every core (2-thread
# cells, CPU burners on the other cores, Ray's two pinned nodes) carry the `whole_machine`
# marker and run after the lanes, unpinned (the Makefile's second pytest).
WHOLE_MACHINE_SKIP = "needs every core; a test lane is pinned to one (make test runs it after)"


def _lane() -> int | None:
    """This pytest-xdist worker's number (gw0 -> 0), or None outside a lane."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") else None


def pytest_configure(config: pytest.Config) -> None:
    lane = _lane()
    if lane is not None and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[lane % len(cpus)]})
        # torch sized its OpenMP pool when conftest imported it, before the pin: one core,
        # one thread, for what the lane computes in its own process (exports, references).
        import torch

        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers import test backends ('tests.execute.fake_backends:...') from the repo root."""
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{path}" if path else str(ROOT))


def needs(*modules: str, reason: str = "") -> pytest.MarkDecorator:
    """Skip unless every module is installed, found without importing it: a module-level
    importorskip of keras or torchao costs every lane seconds of collection."""
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(
        bool(absent), reason=reason or f"could not find {', '.join(absent)}: not installed"
    )


def tiny_cell(backend: str = "eager", **kw) -> Cell:
    fields = dict(model=model_ref("mlp"), backend=backend, batch_size=2, resolution=4, threads=1)
    fields.update(kw)
    return Cell(**fields)


def tiny_task(
    tmp_path: Path, backend: str = "eager", timeout_s: float = 60, **kw
) -> RepetitionTask:
    return RepetitionTask(
        cell=tiny_cell(backend, **kw),
        protocol=FAST,
        timeout_s=timeout_s,
        workdir=str(tmp_path / "w"),
    )


# The runs that keep peaks (generate, --profile) measure them in the parent, once per
# environment. Under the other lane's load a measurement is busy and (rightly) not cached, so
# each such run measured the full sizes again: 9 runs, 43 s of the lanes' time. The suite
# checks how peaks are kept and used, not the ceilings: it measures at the quick sizes (the
# record's methods name them), into a directory of the session's, not the user's ~/.cache.
# tests/measure/test_peaks.py measures for real.
@pytest.fixture(scope="session", autouse=True)
def _small_peaks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    from stackcost.measure import peaks

    cache = tmp_path_factory.mktemp("peaks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(peaks, "GEMM_N", peaks.GEMM_N_QUICK)
        mp.setattr(peaks, "STREAM_N", peaks.STREAM_N_QUICK)
        mp.setattr(peaks, "default_cache_dir", lambda: cache)
        yield


# One build of each native program per test session, in one session-scoped cache directory
# (or the one --native-cache names, which make test's two pytest runs share).
# Each program compiles once per session (libtorch ~40 s, onednn ~15 s on a 2-core machine),
# whichever test needs it first, rather than touching the user's ~/.cache: tests must not
# depend on, or leave behind, a developer's build cache. The programs share that directory
# (each target has its own keyed folder in it), which NativeBackend.cache_dir names for the
# whole session, so backends built by name, in tests/native or elsewhere, find them.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--native-cache",
        type=Path,
        default=None,
        help="build the native programs into this directory (make test's two pytest runs "
        "share one, so a program compiles once); default: a directory of this session's",
    )


@pytest.fixture(scope="session")
def native_cache(tmp_path_factory, pytestconfig: pytest.Config) -> Iterator[Path]:
    """The session's build cache, which backends built by name use too."""
    # Lanes share one cache (their base temps are siblings in the session's directory):
    # a program compiles once, the other lane waits on its build lock (native/build.py).
    base = tmp_path_factory.getbasetemp()
    cache = pytestconfig.getoption("native_cache") or (
        base.parent / "native-cache" if _lane() is not None else base / "native-cache"
    )
    cache.mkdir(parents=True, exist_ok=True)
    previous = NativeBackend.cache_dir
    NativeBackend.cache_dir = cache
    yield cache
    NativeBackend.cache_dir = previous


def cached_build(target: str, cache: Path) -> Build:
    """`target` built into the session's cache (compiled by its first user), or a skip
    naming what the toolchain lacks."""
    problem = toolchain_problem(target, shutil.which)
    if problem:
        pytest.skip(problem)
    return ensure_built(target, cache)


# Warm starters (execute/warm_start.py) outlive one executor in the tests: each starter
# imports torch (about 3 s here), and most of the suite's runs start the same worker
# environment, one CLI call after another. The few most recently used starters stay open
# for the session, keyed by interpreter, working directory and the worker's whole
# environment, so a test still gets exactly the worker a run would start; each repetition
# is still forked into a process of its own. Tests of the starters themselves opt out with
# the `own_starters` marker. A few starters only: each holds a torch import (~250 MB).
SHARED_STARTERS = 3


@pytest.fixture(scope="session")
def _starter_pool() -> Iterator[OrderedDict[tuple, WarmStarter]]:
    pool: OrderedDict[tuple, WarmStarter] = OrderedDict()
    yield pool
    for starter in pool.values():
        starter.close()


@pytest.fixture(autouse=True)
def _shared_starters(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("own_starters"):
        return
    pool = request.getfixturevalue("_starter_pool")

    def key(executor: LocalExecutor, env: dict[str, str]) -> tuple:
        return (executor.python, os.getcwd(), tuple(sorted(env.items())))

    def starter(executor: LocalExecutor, env: dict[str, str]) -> WarmStarter | None:
        if executor.worker_start != "warm" or not executor._maps:
            return None
        k = key(executor, env)
        if k in pool and pool[k].alive():
            pool.move_to_end(k)
            return pool[k]
        try:
            pool[k] = WarmStarter(executor.python, env)
        except (StarterLost, OSError):
            return None
        while len(pool) > SHARED_STARTERS:
            pool.popitem(last=False)[1].close()
        return pool[k]

    def drop(executor: LocalExecutor, env: dict[str, str]) -> None:
        if lost := pool.pop(key(executor, env), None):
            lost.close()

    monkeypatch.setattr(LocalExecutor, "_starter", starter)
    monkeypatch.setattr(LocalExecutor, "_drop", drop)
