"""ONNX Runtime session settings, shared by the onnxruntime backend and its profiler
(stackcost.profile.ort_profile), so the profiled session cannot drift from the measured
one. Imports neither: onnxruntime is passed in, so importing this costs nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",  # ORT >= 1.22
    "all": "ORT_ENABLE_ALL",
}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def opt_levels(ort: Any) -> list[str]:
    """The optimization levels this onnxruntime has."""
    return [k for k, v in OPT_LEVELS.items() if hasattr(ort.GraphOptimizationLevel, v)]


def session_options(
    ort: Any,
    threads: int,
    opt_level: str,
    profile_prefix: Path | None = None,
    spinning: bool = True,
) -> Any:
    """SessionOptions as stackcost measures: the optimization level, `threads` intra-op
    threads, one inter-op thread, sequential execution (one op at a time); profiling on,
    writing to `profile_prefix`, when given. `spinning` False: idle intra-op threads sleep
    at once (ab's bursts, where the other side's worker runs between this one's bursts:
    spinning, an idle worker held a core from it, which doubled ONNX Runtime's step and
    tripled the A/A spread per block here)."""
    if opt_level not in opt_levels(ort):
        raise ValueError(f"onnxruntime opt_level {opt_level!r}: use one of {opt_levels(ort)}")
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[opt_level])
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_prefix)
    return so
