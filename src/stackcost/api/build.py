"""Build the native backends' C++ programs now, rather than on a run's first use.

Each program is compiled once per source and toolchain into a build cache (keyed by
both), which runs read: a later build, or a run, finds it there. Backends that share a
program (libtorch and torchscript-cpp) build it once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BuildFailure", "BuildResult", "BuiltProgram", "build_native"]


@dataclass(frozen=True)
class BuiltProgram:
    """One program, built now or found in the cache."""

    backends: list[str]  # the backends asked for that run it, in the order asked
    executable: Path
    compiled: bool  # False: it was in the cache
    seconds: float  # the compile's time when compiled, the lookup's otherwise


@dataclass(frozen=True)
class BuildFailure:
    """A build that failed: the compiler's or the toolchain's message."""

    backends: list[str]  # the backends whose build failed with this message
    message: str


@dataclass(frozen=True)
class BuildResult:
    """What `build_native` built, and what failed (failures first in the CLI)."""

    built: list[BuiltProgram] = field(default_factory=list)
    failed: list[BuildFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every program was built."""
        return not self.failed


def build_native(backends: Sequence[str], cache_dir: Path | None = None) -> BuildResult:
    """Compile the programs of `backends` (registered names or 'module:Class' paths) into
    the build cache, each program once. A failed build is reported, not raised; the
    others still build.

    Args:
        backends: native backends, e.g. ["libtorch", "onednn"] (cudnn: the GPU one).
        cache_dir: the build cache (default: ~/.cache/stackcost/native, the one runs use).

    Raises:
        SpecError: an unknown backend, or one that has nothing to build (not native),
            before anything is built.
    """
    from stackcost.backends import check_name, load_backend
    from stackcost.backends.base import Backend
    from stackcost.errors import SpecError
    from stackcost.native.build import BuildError

    loaded = []
    for name in backends:
        check_name(name)
        loaded.append((name, load_backend(name)))
    for name, backend in loaded:
        # A backend that does not override Backend.build builds nothing: refused here, so
        # `libtorch,eager` compiles nothing rather than libtorch and then refusing eager.
        if type(backend).build is Backend.build:
            raise SpecError(_nothing_to_build(name))
    built: dict[str, BuiltProgram] = {}  # by executable: backends sharing it built it once
    failed: dict[str, list[str]] = {}  # by message: backends sharing a program retried it
    for name, backend in loaded:
        try:
            build = backend.build(cache_dir)
        except BuildError as exc:
            failed.setdefault(str(exc), []).append(name)
            continue
        if build is None:  # an override that built nothing after all
            raise SpecError(_nothing_to_build(name))
        first = built.setdefault(
            str(build.executable),
            BuiltProgram([], build.executable, build.compiled, build.seconds),
        )
        first.backends.append(name)
    return BuildResult(
        built=list(built.values()),
        failed=[BuildFailure(names, message) for message, names in failed.items()],
    )


def _nothing_to_build(name: str) -> str:
    return f"{name} has nothing to build (not a native backend)"
