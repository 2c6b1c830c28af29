"""Breakdown of a native program's step from its own per-primitive (per-layer) timers.

stackcost_onednn runs the network as a flat list of primitives. Its profiled pass
(`profile_iters=N`) times every primitive on its own with steady_clock (waiting on the
stream after each) and the whole iteration around them. stackcost_cudnn writes the same
file with one entry per layer (conv+bias+activation(+residual), pooling, fc, softmax),
timed between CUDA events on its stream, and adds each convolution's algorithm and
workspace; the timeline's "note" says how its times were taken. So, per iteration:

- kernels: the sum of the primitives' times (they run one after another, never overlap);
  layout reorders are primitives too and count here, but get their own top-op rows;
- overhead: iteration time minus kernels: the program's loop and oneDNN's argument
  handling between primitives;
- remainder: the loop's wall (steady_clock around all N iterations) minus both, i.e. the
  time between iterations.

Top ops group primitives by kind and implementation ("convolution (jit:avx512_core)",
"convolution (IMPLICIT_PRECOMP_GEMM)"), as torch's table groups by op; the slowest layers
are listed in the notes, with their convolution algorithm where the timeline names one.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from stackcost.profile.breakdown import Breakdown, top_ops

SLOWEST_LAYERS = 3


def primitive_breakdown(
    answer: dict[str, Any], unprofiled_ms: float | None, top_n: int = 10
) -> Breakdown:
    """The Breakdown of a profiled stackcost_onednn or stackcost_cudnn run (its answer and
    timeline file)."""
    path = Path(answer["profile_path"])
    try:
        timeline = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"cannot read the program's timeline {path}: {exc}") from exc
    details = answer["details"]
    iters = int(details["profile_iters"])
    wall_ms = int(details["profile_wall_ns"]) / 1e6 / iters
    steps = timeline["steps"]
    kernels_ms = sum(int(s["ns"]) for s in steps) / 1e6 / iters
    iteration_ms = int(timeline["iteration_ns"]) / 1e6 / iters
    # Each primitive runs once per iteration: one row per call keeps calls and self time.
    rows = [
        (f"{s['kind']} ({s['impl']})" if s["impl"] else s["kind"], int(s["ns"]) / 1e6 / iters)
        for s in steps
        for _ in range(iters)
    ]
    by_layer: dict[str, float] = defaultdict(float)
    algo: dict[str, str] = {}  # a layer's convolution algorithm (stackcost_cudnn's timeline)
    for s in steps:
        by_layer[s["name"]] += int(s["ns"]) / 1e6 / iters
        if s.get("algo"):
            algo.setdefault(s["name"], str(s["algo"]))
    slowest = sorted(by_layer.items(), key=lambda kv: -kv[1])[:SLOWEST_LAYERS]

    def layer(name: str, ms: float) -> str:
        how = f", {algo[name]}" if name in algo else ""
        return f"{name} {ms:.3f} ms ({ms / wall_ms:.0%}{how})"

    notes = [
        timeline.get("note")
        or f"{len(steps)} primitives per iteration, each timed on its own; kernels = their "
        "sum, overhead = the rest of each iteration (the program's loop, argument handling)",
        "slowest layers: " + ", ".join(layer(name, ms) for name, ms in slowest),
    ]
    if unprofiled_ms:
        extra = wall_ms - unprofiled_ms
        notes.append(
            f"unprofiled median {unprofiled_ms:.3f} ms/iter: the timers add {extra:+.3f} "
            f"ms/iter ({extra / unprofiled_ms:+.0%}), counted in overhead"
        )
    return Breakdown(
        method=timeline.get("method", "per-primitive timers"),
        iters=iters,
        wall_ms=wall_ms,
        parts_ms={"kernels": kernels_ms, "overhead": max(iteration_ms - kernels_ms, 0.0)},
        top_ops=top_ops(rows, wall_ms * iters, top_n),
        notes=notes,
        unprofiled_wall_ms=unprofiled_ms,
    )
