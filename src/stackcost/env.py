"""The environment record stored with every run."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

FRAMEWORKS = (
    "torch",
    "onnxruntime",
    "openvino",
    "onnx",
    "onnxscript",
    "tensorflow-cpu",
    "tensorflow",
    "keras",
    "jax",
    "jaxlib",
    "numpy",
    "scipy",
    # A GPU run's libraries: cuDNN and cuBLAS as their wheels ship them, Triton, NVML's binding.
    "nvidia-cudnn-cu13",
    "nvidia-cublas",
    "triton",
    "nvidia-ml-py",
)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_PROC_BIND")
# The x86 ISA features that decide int8 (and bf16) speed, with their names in reports: VNNI
# fuses the int8 multiply-add, AMX-INT8 runs int8 tiles, AVX2 is the fallback every int8
# kernel has, AVX-512 BF16 decides the bf16 paths a quantized graph may keep.
INT8_ISA: dict[str, str] = {
    "avx2": "AVX2",
    "avx512_vnni": "AVX-512 VNNI",
    "avx_vnni": "AVX-VNNI",
    "amx_int8": "AMX-INT8",
    "avx512_bf16": "AVX-512 BF16",
}
# The flags whose int8 dot product (VPDPBUSD, AMX tiles) accumulates in 32 bits: without one,
# x86 int8 kernels multiply with VPMADDUBSW, whose 16-bit sums can saturate.
VNNI_FLAGS: tuple[str, ...] = ("avx512_vnni", "avx_vnni", "amx_int8")
# ONEDNN_MAX_CPU_ISA caps under which oneDNN (and OpenVINO's and PyTorch's oneDNN kernels)
# runs no VNNI kernel, whatever the CPU has (oneDNN's "CPU dispatcher control" values).
ONEDNN_NO_VNNI_CAPS: tuple[str, ...] = ("SSE41", "AVX", "AVX2", "AVX512_CORE")
# ...and those under which it runs no bf16 kernel. A library that reads the CPU's own flags
# (OpenVINO's plugin, TensorFlow's oneDNN ops) still picks bf16 under them, and oneDNN then
# cannot create the primitive: a narrowed shell is not an older CPU for bf16.
ONEDNN_NO_BF16_CAPS: tuple[str, ...] = (
    *ONEDNN_NO_VNNI_CAPS,
    "AVX2_VNNI",
    "AVX512_CORE_VNNI",
)
# /proc/cpuinfo flags recorded with every run: the int8 ISA above and the float paths.
CPU_FLAGS: tuple[str, ...] = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "amx_bf16",
    "amx_tile",
    "fma",
    "avx512_vnni",
    "avx_vnni",
    "amx_int8",
)
# Flags stackcost read before avx_vnni and amx_int8 joined: in a store without
# "flags_checked", only these can be said to be absent.
LEGACY_CPU_FLAGS: tuple[str, ...] = CPU_FLAGS[:7]
# What may name an environment variable: --inherit-env and a backend's own settings.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def cores() -> int:
    """CPUs this process may run on: the default thread count everywhere."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def torch_cuda(path: Path | None = None) -> str | None:
    """The CUDA version torch was built against, read from torch/version.py (or `path`)
    without importing torch (every command collects the environment; importing costs
    seconds)."""
    import re
    from importlib.util import find_spec

    if path is None:
        spec = find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        found = re.search(r"^cuda\b[^=]*=\s*['\"]([^'\"]+)['\"]", path.read_text(), re.MULTILINE)
    except OSError:
        return None
    return found.group(1) if found else None


def git_commit(path: Path) -> dict[str, Any] | None:
    """Commit and dirty flag of the git checkout containing `path`, if any."""
    try:
        run = lambda *a: subprocess.run(  # noqa: E731
            ["git", "-C", str(path), *a], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        return {"commit": run("rev-parse", "HEAD"), "dirty": bool(run("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The CPU's model, the CPU_FLAGS it has, and its cores (`cpuinfo`: for tests)."""
    model, flags = platform.processor() or "unknown", []
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("unknown", "", platform.machine()):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = value.split()
    except OSError:
        pass
    return {
        "model": model,
        "flags": [f for f in CPU_FLAGS if f in flags],
        # What was looked for: a flag checked and absent differs from one never checked
        # (stores written before avx_vnni and amx_int8 were read).
        "flags_checked": list(CPU_FLAGS),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }


# The variables oneDNN reads its ISA cap from, in its order: the older name counts only where
# the newer is unset. Messages name them as ONEDNN_CAP_NAMES.
ONEDNN_CAP_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
ONEDNN_CAP_NAMES = " or ".join(ONEDNN_CAP_VARS)
# Every library ISA cap a shell may set to run another machine's kernels here: oneDNN's (and
# through it OpenVINO's and PyTorch's) and ATen's dispatch. Workers inherit them, runs record
# them: they change every number. ONNX Runtime's MLAS has none (it reads cpuid).
ISA_CAP_VARS = (*ONEDNN_CAP_VARS, "ATEN_CPU_CAPABILITY")


def isa_caps(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ISA caps set in `environ` (this process' environment by default), by variable."""
    environ = os.environ if environ is None else environ
    return {v: environ[v] for v in ISA_CAP_VARS if environ.get(v)}


def onednn_cap(environ: Mapping[str, str] | None = None) -> str | None:
    """The ISA cap oneDNN obeys in `environ` (this process' environment by default), None
    when uncapped."""
    environ = os.environ if environ is None else environ
    return next((environ[v] for v in ONEDNN_CAP_VARS if environ.get(v)), None)


def vnni(flags: Sequence[str], onednn_cap: str | None = None) -> list[str]:
    """The VNNI_FLAGS among the CPU's `flags` an int8 kernel may use: none when oneDNN's ISA
    is capped below them (`onednn_cap`, ONEDNN_MAX_CPU_ISA's value; MLAS ignores it)."""
    if onednn_cap and onednn_cap.strip().upper() in ONEDNN_NO_VNNI_CAPS:
        return []
    return [f for f in VNNI_FLAGS if f in flags]


def onednn_bf16_capped(onednn_cap: str | None) -> bool:
    """Whether ONEDNN_MAX_CPU_ISA's value keeps oneDNN off every bf16 kernel."""
    return bool(onednn_cap) and onednn_cap.strip().upper() in ONEDNN_NO_BF16_CAPS


def gpus(nvml: Any = None) -> tuple[list[dict[str, Any]], str | None]:
    """The GPUs NVML sees (name, uuid, memory, driver) and, when there are none, why."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            return [], f"no NVML: {exc}"

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return [], f"no NVML: {text(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            out.append(
                {
                    "index": i,
                    "name": text(nvml.nvmlDeviceGetName(h)),
                    "uuid": text(nvml.nvmlDeviceGetUUID(h)),
                    "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                }
            )
        driver = text(nvml.nvmlSystemGetDriverVersion())
        cuda_driver = None  # the CUDA version the driver supports, e.g. 13000 -> "13.0"
        with contextlib.suppress(nvml.NVMLError, AttributeError):
            v = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
            cuda_driver = f"{v // 1000}.{v % 1000 // 10}"
        for i, gpu in enumerate(out):
            gpu["driver"] = driver
            gpu["cuda_driver"] = cuda_driver
            with contextlib.suppress(nvml.NVMLError, AttributeError):
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(
                    nvml.nvmlDeviceGetHandleByIndex(i)
                )
                gpu["compute_capability"] = f"{major}.{minor}"
        return out, None if out else "NVML found no GPU"
    except nvml.NVMLError as exc:
        return [], f"NVML: {text(exc)}"
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def fingerprint(env: dict[str, Any]) -> str:
    """What must match for stored results to count as this machine's: resume keys on it.

    The project's git commit is deliberately left out, so a sweep survives an edit to
    the user's code; the versions that produce the numbers are in.
    """
    import hashlib
    import json

    stable = {
        "stackcost": env.get("stackcost"),
        "versions": env.get("versions"),
        "python": env.get("python"),
        "hostname": env.get("hostname"),
        "cpu": (env.get("cpu") or {}).get("model"),
        "cores": (env.get("cpu") or {}).get("logical_cores"),
    }
    return hashlib.sha1(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]


def collect(threads: list[int] | None = None) -> dict[str, Any]:
    from stackcost.version import __version__

    mem = psutil.virtual_memory()
    devices, no_gpu = gpus()
    return {
        "stackcost": __version__,
        "stackcost_git": git_commit(Path(__file__).resolve().parent),
        "project_git": git_commit(Path.cwd()),
        "versions": {name: _version(name) for name in FRAMEWORKS},
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "os": platform.platform(),
        "hostname": platform.node(),
        "cpu": cpu_info(),
        "isa_caps": isa_caps(),  # the CPU's flags above, narrowed for the libraries that obey
        "memory_bytes": mem.total,
        "gpus": devices,  # from NVML where it exists
        "gpu_reason": no_gpu,  # why there are none
        "torch_cuda": torch_cuda(),  # the CUDA runtime torch was built with; None: a CPU build
        "threads": {"requested": threads, **{v: os.environ.get(v) for v in THREAD_VARS}},
        "collected_at": now(),
    }
