"""One build of each native program per test session, in one session-scoped cache directory.

Each program compiles once per session (libtorch ~45 s, onednn ~20 s on this machine),
whichever test needs it first, rather than touching the user's ~/.cache: tests must not
depend on, or leave behind, a developer's build cache. The programs share that directory
(each target has its own keyed folder in it), which NativeBackend.cache_dir names for the
whole session, so backends built by name find the same programs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from stackcost import zoo
from stackcost.backends.native import NativeBackend
from stackcost.cell import ModelRef
from stackcost.measure.protocol import Protocol
from stackcost.native.build import Build, ensure_built, toolchain_problem
from stackcost.workload import Example, make_example

# Shared by the native tests: a short protocol and tiny models at their smallest inputs.
QUICK = Protocol(min_time_s=0.05, min_iters=5, max_time_s=2, warmup_max_time_s=1)
MODELS = {
    "resnet18": (ModelRef(name="resnet18"), 32),
    "mnist-cnn": (ModelRef(name="mnist-cnn", num_classes=10, in_channels=1), 28),
}


def example(ref: ModelRef, resolution: int, batch: int = 1) -> Example:
    """The workload's own inputs for an image model, as the worker draws them."""
    return make_example(zoo.workload_of(ref), ref, batch, {"resolution": resolution})


@pytest.fixture(scope="session")
def native_cache(tmp_path_factory) -> Iterator[Path]:
    """The session's build cache, which backends built by name use too."""
    cache = tmp_path_factory.mktemp("native-cache")
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


@pytest.fixture(scope="session")
def native_build(native_cache) -> Build:
    return cached_build("libtorch", native_cache)


@pytest.fixture(scope="session")
def onednn_build(native_cache) -> Build:
    return cached_build("onednn", native_cache)
