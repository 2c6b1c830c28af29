"""The native tests' builds (one per session, in tests/conftest.py's shared build cache),
protocol and models."""

from __future__ import annotations

import pytest

from stackcost import zoo
from stackcost.cell import ModelRef
from stackcost.measure.protocol import Protocol
from stackcost.native.build import Build
from stackcost.workload import Example, make_example
from tests.conftest import cached_build

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
def native_build(native_cache) -> Build:
    return cached_build("libtorch", native_cache)


@pytest.fixture(scope="session")
def onednn_build(native_cache) -> Build:
    return cached_build("onednn", native_cache)
