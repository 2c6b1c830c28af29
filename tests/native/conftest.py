"""One build of the native program per test session, in a session-scoped cache directory.

Each session compiles once (~20-25 s on this machine) rather than touching the user's
~/.cache: tests must not depend on, or leave behind, a developer's build cache.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

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


def _cached_build(target: str, tmp_path_factory) -> Iterator[Build]:
    """Build `target` once into a temporary cache that backends built by name use too."""
    problem = toolchain_problem(target, shutil.which)
    if problem:
        pytest.skip(problem)
    cache = tmp_path_factory.mktemp(f"{target}-cache")
    build = ensure_built(target, cache)
    previous = NativeBackend.cache_dir
    NativeBackend.cache_dir = cache
    yield build
    NativeBackend.cache_dir = previous


@pytest.fixture(scope="session")
def native_build(tmp_path_factory) -> Iterator[Build]:
    yield from _cached_build("libtorch", tmp_path_factory)


@pytest.fixture(scope="module")
def onednn_build(tmp_path_factory) -> Iterator[Build]:
    yield from _cached_build("onednn", tmp_path_factory)
