"""The worker's environment: a whitelist, what stackcost sets, and what the user names.

A worker used to inherit the parent's whole environment, so a stray KMP_AFFINITY,
DNNL_VERBOSE or TORCHINDUCTOR_* in the user's shell changed the numbers unrecorded. As
pyperf does, a worker gets only what a process needs to start, stackcost's own thread
settings, and the variables named with --inherit-env; the performance-relevant part of
that is recorded with the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from stackcost.env import ISA_CAP_VARS

if TYPE_CHECKING:
    pass

# What a Python process, a C++ toolchain (native rungs compile on first use) and a CUDA
# runtime need to start and find their files; none of these tunes a kernel.
BASE = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "TZ",
    "LANG",
    "LANGUAGE",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    # Which GPU is measured: passed on, and recorded.
    "CUDA_VISIBLE_DEVICES",
)
BASE_PREFIXES = ("LC_",)
# Passed but not worth recording: they locate things, they do not change a number.
UNRECORDED = frozenset({"HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG", "LANGUAGE"})


def worker_environ(
    parent: Mapping[str, str], own: Mapping[str, str], inherit: Iterable[str] = ()
) -> dict[str, str]:
    """The environment a worker starts with: the whitelist and `inherit` taken from
    `parent` where set, then `own` (stackcost's thread settings), which wins."""
    # ISA caps pass on so a narrowed shell narrows its workers too (DESIGN.md).
    wanted = set(BASE) | set(ISA_CAP_VARS) | set(inherit)
    env = {k: v for k, v in parent.items() if k in wanted or k.startswith(BASE_PREFIXES)}
    return {**env, **own}


def recorded(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of a worker's environment stored with the run: everything that can
    change a measurement (thread settings, inherited tuning variables, library paths)."""
    return {
        k: v
        for k, v in sorted(environ.items())
        if k not in UNRECORDED and not k.startswith(BASE_PREFIXES)
    }
