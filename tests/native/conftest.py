"""One build of the native program per test session, in a session-scoped cache directory.

Each session compiles once (~20-25 s on this machine) rather than touching the user's
~/.cache: tests must not depend on, or leave behind, a developer's build cache.
"""

from __future__ import annotations

import shutil

import pytest

from stackcost.backends.native import NativeBackend
from stackcost.native.build import Build, ensure_built, toolchain_problem


@pytest.fixture(scope="session")
def native_build(tmp_path_factory) -> Build:
    problem = toolchain_problem("libtorch", shutil.which)
    if problem:
        pytest.skip(problem)
    cache = tmp_path_factory.mktemp("native-cache")
    build = ensure_built("libtorch", cache)
    previous = NativeBackend.cache_dir
    NativeBackend.cache_dir = cache  # backends built through load_backend use it too
    yield build
    NativeBackend.cache_dir = previous
