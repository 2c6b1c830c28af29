"""Build the C++ programs on first use, into a cache keyed by what they are built from.

The key hashes the sources, the compiler's version line, cmake's version and the torch
version (the oneDNN version for the onednn target), so a new compiler or a torch upgrade rebuilds while everything else reuses the
binary. Builds take a file lock (two workers never compile the same key at once) and are
renamed into place only when complete, so a crashed build never looks like a cached one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Which = Callable[[str], "str | None"]

SOURCE_ROOT = Path(__file__).resolve().parent
# target -> (source folder under native/, executable name)
TARGETS: dict[str, tuple[str, str]] = {
    "libtorch": ("libtorch", "stackcost_libtorch"),
    "onednn": ("onednn", "stackcost_onednn"),
}
_FIX_TOOLS = "apt-get install cmake g++"
# Debian's libdnnl-dev: headers here, CMake config under /usr/lib/<triplet>/cmake/dnnl.
DNNL_VERSION_HEADER = Path("/usr/include/oneapi/dnnl/dnnl_version.h")


class BuildError(RuntimeError):
    """The toolchain is there but the build failed; the message ends with the log's tail."""


@dataclass(frozen=True)
class Build:
    executable: Path
    key: str
    compiled: bool  # False: reused from the cache
    seconds: float  # compile time when compiled, lookup time otherwise


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "stackcost" / "native"


def toolchain_problem(target: str = "libtorch", which: Which = shutil.which) -> str | None:
    """Why `target` cannot be built here, with the command that fixes it; None if it can."""
    missing = [tool for tool in ("cmake", "g++") if which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found: {_FIX_TOOLS}"
    if target == "libtorch" and _torch_cmake_dir() is None:
        return "libtorch (the CMake config inside the torch wheel) not found: pip install torch"
    if target == "onednn" and onednn_version() is None:
        return f"oneDNN ({DNNL_VERSION_HEADER}) not found: apt-get install libdnnl-dev"
    return None


def onednn_version(header: Path | None = None) -> str | None:
    """The installed oneDNN's version, "2.6.3", from its version header; None if absent."""
    import re

    header = header or DNNL_VERSION_HEADER
    try:
        text = header.read_text()
    except OSError:
        return None
    parts = [
        re.search(rf"#define DNNL_VERSION_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")
    ]
    return ".".join(m.group(1) for m in parts) if all(parts) else None  # type: ignore[union-attr]


def _torch_cmake_dir() -> Path | None:
    try:
        import torch.utils
    except ImportError:
        return None
    prefix = Path(torch.utils.cmake_prefix_path)
    return prefix if (prefix / "Torch" / "TorchConfig.cmake").is_file() else None


def _version_line(tool: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else ""


def build_key(target: str, which: Which = shutil.which) -> str:
    folder, _ = TARGETS[target]
    h = hashlib.sha256()
    # The program's folder and the header every program shares.
    for path in sorted([*(SOURCE_ROOT / folder).iterdir(), *(SOURCE_ROOT / "common").iterdir()]):
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for tool in ("g++", "cmake"):
        h.update(_version_line(which(tool) or tool).encode() + b"\0")
    if target == "onednn":
        h.update(f"onednn {onednn_version()}".encode())
    else:
        import torch

        h.update(torch.__version__.encode())
    return h.hexdigest()[:16]


def ensure_built(
    target: str = "libtorch", cache_dir: Path | None = None, which: Which = shutil.which
) -> Build:
    """The executable for `target`, compiling it (CMake, Release) when the cache lacks it."""
    problem = toolchain_problem(target, which)
    if problem:
        raise BuildError(problem)
    t = time.perf_counter()
    folder, exe_name = TARGETS[target]
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    key = build_key(target, which)
    final = cache / f"{target}-{key}"
    executable = final / exe_name
    if executable.is_file():
        return Build(executable, key, False, time.perf_counter() - t)
    with open(cache / f"{target}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if executable.is_file():  # another process built it while we waited
            return Build(executable, key, False, time.perf_counter() - t)
        work = cache / f"{target}-{key}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        _compile(SOURCE_ROOT / folder, work, which)
        final_tmp = cache / f"{target}-{key}.out-{os.getpid()}"
        final_tmp.mkdir()
        shutil.copy2(work / exe_name, final_tmp / exe_name)
        final_tmp.rename(final)  # atomic: a half-built directory is never `final`
        shutil.rmtree(work, ignore_errors=True)
    return Build(executable, key, True, time.perf_counter() - t)


def _compile(source: Path, work: Path, which: Which) -> None:
    cmake, cxx = which("cmake"), which("g++")
    assert cmake and cxx  # toolchain_problem checked them
    generator = ["-G", "Ninja"] if which("ninja") else []
    configure = [
        cmake, "-S", str(source), "-B", str(work), *generator,
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_CXX_COMPILER={cxx}",
    ]  # fmt: skip
    torch_dir = _torch_cmake_dir()
    if torch_dir is not None:  # the onednn target finds dnnl in the system paths
        configure.append(f"-DCMAKE_PREFIX_PATH={torch_dir}")
    # One translation unit: more jobs would not help, and the machine is shared.
    for cmd in (configure, [cmake, "--build", str(work), "--parallel", "1"]):
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-20:])
            raise BuildError(f"{' '.join(cmd[:2])} failed (exit {out.returncode}):\n{tail}")
