"""Fixtures shared by the executor's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stackcost.execute.local import LocalExecutor


@pytest.fixture(scope="session")
def warm_executor() -> Iterator[LocalExecutor]:
    """One local executor for the runs whose point is not how a worker starts: its warm
    starters (one per worker environment) stay open across the tests that take it, so
    torch is imported once per environment, not once per run. Each repetition is still
    forked from a starter of its own environment into a process of its own, as in any run
    (test_warm_start.py tests the starts themselves)."""
    executor = LocalExecutor()
    with executor.session():
        yield executor
