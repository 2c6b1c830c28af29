"""Build the C++ programs on first use, into a cache keyed by what they are built from.

The key hashes the sources, the compiler's version line, cmake's version and the torch
version (the oneDNN version for the onednn target; for cudnn, `nvcc --version`, the cuDNN
and cuBLAS versions from their headers and where those libraries are), so a new compiler
or a library upgrade rebuilds while everything else reuses the binary. Builds take a file lock (two workers never compile the same key at once) and are
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
    "cudnn": ("cudnn", "stackcost_cudnn"),
}
_FIX_TOOLS = "apt-get install cmake g++"
# Debian's libdnnl-dev: headers here, CMake config under /usr/lib/<triplet>/cmake/dnnl.
DNNL_VERSION_HEADER = Path("/usr/include/oneapi/dnnl/dnnl_version.h")
# cudnn: nvcc from PATH, else the toolkit's usual home; cuDNN and cuBLAS from the pip wheels
# (found by import, wherever site-packages is), else these system folders.
CUDA_HOME = Path("/usr/local/cuda")
SYSTEM_INCLUDE = (Path("/usr/include"), CUDA_HOME / "include")
SYSTEM_LIB = (Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), CUDA_HOME / "lib64")
_FIX_CUDA_LIBS = "pip install nvidia-cudnn-cu13 nvidia-cublas"


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
    if target == "cudnn":
        if nvcc_path(which) is None:
            return (
                f"nvcc (the CUDA toolkit) not found on PATH or in {CUDA_HOME / 'bin'}: "
                "install the CUDA toolkit (13.x)"
            )
        if cuda_toolkit_root(which) is None:
            return (
                f"the CUDA toolkit's headers (include/cuda_runtime_api.h) not found beside "
                f"nvcc or in {CUDA_HOME}: install the CUDA toolkit (13.x)"
            )
        libs = cuda_libraries()
        if isinstance(libs, str):
            return f"{libs}: {_FIX_CUDA_LIBS}"
    return None


def cuda_toolkit_root(which: Which = shutil.which) -> Path | None:
    """The toolkit nvcc belongs to (the folder above its bin/), else /usr/local/cuda: the
    first holding include/cuda_runtime_api.h. nvcc may be a wrapper script elsewhere."""
    nvcc = nvcc_path(which)
    candidates = [Path(nvcc).resolve().parent.parent] if nvcc else []
    for root in [*candidates, CUDA_HOME]:
        if (root / "include" / "cuda_runtime_api.h").is_file():
            return root
    return None


def nvcc_path(which: Which = shutil.which) -> str | None:
    """nvcc on PATH, else in /usr/local/cuda/bin; None when neither has it."""
    found = which("nvcc")
    if found:
        return found
    fallback = CUDA_HOME / "bin" / "nvcc"
    return str(fallback) if fallback.is_file() else None


@dataclass(frozen=True)
class CudaLibraries:
    """Where the cudnn target's headers and libraries are: passed to CMake as -D values."""

    cudnn_include: Path
    cudnn_library: Path
    cublas_include: Path
    cublas_library: Path

    def cmake_args(self) -> list[str]:
        return [
            f"-DCUDNN_INCLUDE_DIR={self.cudnn_include}",
            f"-DCUDNN_LIBRARY={self.cudnn_library}",
            f"-DCUBLAS_INCLUDE_DIR={self.cublas_include}",
            f"-DCUBLAS_LIBRARY={self.cublas_library}",
        ]


def _package_dirs(*modules: str) -> list[Path]:
    """The folders of installed namespace packages such as nvidia.cudnn (none if absent)."""
    import importlib.util

    found: list[Path] = []
    for module in modules:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):  # the parent namespace (nvidia) is not installed
            continue
        if spec is not None and spec.submodule_search_locations:
            found.extend(Path(p) for p in spec.submodule_search_locations)
    return found


def _first(folders: list[Path], *patterns: str) -> Path | None:
    """The first file matching a pattern (in order) in the first folder that has one."""
    for folder in folders:
        for pattern in patterns:
            hits = sorted(folder.glob(pattern)) if folder.is_dir() else []
            if hits:
                return hits[0]
    return None


def cuda_libraries() -> CudaLibraries | str:
    """cuDNN's and cuBLAS's headers and libraries: the pip wheels' folders first
    (nvidia.cudnn; nvidia.cu13 or nvidia.cublas), then the system's. A string: what is
    missing."""
    cudnn = _package_dirs("nvidia.cudnn")
    cublas = _package_dirs("nvidia.cu13", "nvidia.cublas")
    include = list(SYSTEM_INCLUDE)
    lib = list(SYSTEM_LIB)
    cudnn_h = _first([d / "include" for d in cudnn] + include, "cudnn_version.h")
    cudnn_so = _first([d / "lib" for d in cudnn] + lib, "libcudnn.so", "libcudnn.so.[0-9]*")
    cublas_h = _first([d / "include" for d in cublas] + include, "cublas_v2.h")
    cublas_so = _first([d / "lib" for d in cublas] + lib, "libcublas.so", "libcublas.so.[0-9]*")
    missing = [
        what
        for what, path in (
            ("cuDNN headers (cudnn_version.h)", cudnn_h),
            ("cuDNN library (libcudnn.so)", cudnn_so),
            ("cuBLAS headers (cublas_v2.h)", cublas_h),
            ("cuBLAS library (libcublas.so)", cublas_so),
        )
        if path is None
    ]
    if missing:
        return f"{', '.join(missing)} not found"
    assert cudnn_h and cudnn_so and cublas_h and cublas_so
    return CudaLibraries(cudnn_h.parent, cudnn_so, cublas_h.parent, cublas_so)


def _header_version(header: Path, macros: tuple[str, str, str]) -> str | None:
    import re

    try:
        text = header.read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define {m}\s+(\d+)", text) for m in macros]
    return ".".join(m.group(1) for m in parts) if all(parts) else None  # type: ignore[union-attr]


def cudnn_version(libs: CudaLibraries | None = None) -> str | None:
    """The cuDNN version the cudnn target builds against, "9.x.y", from cudnn_version.h."""
    found = libs or cuda_libraries()
    if isinstance(found, str):
        return None
    return _header_version(
        found.cudnn_include / "cudnn_version.h", ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL")
    )


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
    elif target == "cudnn":
        nvcc = nvcc_path(which)
        out = subprocess.run([nvcc or "nvcc", "--version"], capture_output=True, text=True)
        h.update(out.stdout.encode() + b"\0")
        libs = cuda_libraries()
        if not isinstance(libs, str):
            cublas = _header_version(
                libs.cublas_include / "cublas_api.h",
                ("CUBLAS_VER_MAJOR", "CUBLAS_VER_MINOR", "CUBLAS_VER_PATCH"),
            )
            # The libraries' paths too: the binary finds them there (its RPATH).
            h.update(f"cudnn {cudnn_version(libs)} cublas {cublas} {libs}".encode())
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
        _compile(SOURCE_ROOT / folder, work, which, target)
        final_tmp = cache / f"{target}-{key}.out-{os.getpid()}"
        final_tmp.mkdir()
        shutil.copy2(work / exe_name, final_tmp / exe_name)
        final_tmp.rename(final)  # atomic: a half-built directory is never `final`
        shutil.rmtree(work, ignore_errors=True)
    return Build(executable, key, True, time.perf_counter() - t)


def _compile(source: Path, work: Path, which: Which, target: str = "libtorch") -> None:
    cmake, cxx = which("cmake"), which("g++")
    assert cmake and cxx  # toolchain_problem checked them
    generator = ["-G", "Ninja"] if which("ninja") else []
    configure = [
        cmake, "-S", str(source), "-B", str(work), *generator,
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_CXX_COMPILER={cxx}",
    ]  # fmt: skip
    if target == "cudnn":  # no torch: the CUDA toolkit, cuDNN and cuBLAS, by path
        root, libs = cuda_toolkit_root(which), cuda_libraries()
        assert root and not isinstance(libs, str)  # toolchain_problem checked them
        configure += [
            f"-DCUDAToolkit_ROOT={root}",
            # The real nvcc (the one on PATH may be a wrapper script) for the program's own
            # kernels (optimizer.cu), with the same g++ as host compiler.
            f"-DCMAKE_CUDA_COMPILER={root / 'bin' / 'nvcc'}",
            f"-DCMAKE_CUDA_HOST_COMPILER={cxx}",
            *libs.cmake_args(),
        ]
    elif (torch_dir := _torch_cmake_dir()) is not None:  # onednn finds dnnl in system paths
        configure.append(f"-DCMAKE_PREFIX_PATH={torch_dir}")
    # One job per core this process may use: onednn's three translation units build in
    # 14 s instead of 23 s on 2 cores. A build runs before any timed loop (first use, or
    # `stackcost build`), so it has the cores to itself.
    jobs = str(len(os.sched_getaffinity(0)))
    for cmd in (configure, [cmake, "--build", str(work), "--parallel", jobs]):
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-20:])
            raise BuildError(f"{' '.join(cmd[:2])} failed (exit {out.returncode}):\n{tail}")
