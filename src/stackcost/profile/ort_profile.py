"""Breakdown of an ONNX Runtime step from ORT's own profiler (a Chrome-trace JSON).

The session takes the onnxruntime backend's own settings (the backend hands in the
factory of its SessionOptions: optimization level, intra-op threads, one inter-op thread,
sequential execution), so the profiled step is the measured one plus ORT's profiling. In the trace each `sess.run` is a "model_run" event
and each node a "<node>_kernel_time" event. Then, per iteration:

- kernels: the union of node kernel intervals (the sequential executor runs one node
  at a time, so this is their sum; the union keeps it right for a parallel executor);
- overhead: the rest of the trace span from the first timed model_run's start to the
  last one's end: ORT's executor and session code inside model_run, plus the Python
  binding and input/output conversion between runs;
- remainder: wall (perf_counter) minus that span: the binding time of one run's edges
  and the loop, which the trace cannot see.

With the CUDA provider the node times are host-side (launch, plus any wait), so the
split is what the host saw, not device compute vs idle.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stackcost.profile.breakdown import Breakdown, Interval, intersect, length, top_ops


def profile_ort(
    model_path: Path,
    feeds: Mapping[str, Any],
    options: Callable[[Path | None], Any],
    workdir: Path,
    iters: int = 10,
    warmup: int = 2,
    top_n: int = 10,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    reference: bool = True,
) -> Breakdown:
    """Run an ONNX model `iters` times with ORT profiling on and split its wall time.

    `options(prefix)` makes the session's SessionOptions, profiling to `prefix` when it is
    not None; `feeds` maps input names to numpy arrays; `workdir` receives the trace JSON (kept,
    so it can be opened in Perfetto). With `reference`, a second, unprofiled session
    times the same runs, to size the profiler's own cost.
    """
    import onnxruntime as ort

    if iters < 1:
        raise ValueError("iters must be >= 1")
    workdir.mkdir(parents=True, exist_ok=True)
    sess = ort.InferenceSession(
        str(model_path),
        options(workdir / "ort"),
        providers=list(providers),
    )
    if sess.get_providers()[0] != providers[0]:
        # ORT falls back to CPU silently; a breakdown of the wrong provider is worse than none.
        raise RuntimeError(f"onnxruntime did not use {providers[0]}: got {sess.get_providers()}")
    feeds = dict(feeds)
    for _ in range(warmup):
        sess.run(None, feeds)
    t0 = time.perf_counter_ns()
    for _ in range(iters):
        sess.run(None, feeds)
    t1 = time.perf_counter_ns()
    trace = Path(sess.end_profiling())
    wall_ms = (t1 - t0) / 1e6 / iters

    unprofiled_ms = None
    if reference:
        plain = ort.InferenceSession(
            str(model_path),
            options(None),
            providers=list(providers),
        )
        for _ in range(warmup):
            plain.run(None, feeds)
        r0 = time.perf_counter_ns()
        for _ in range(iters):
            plain.run(None, feeds)
        unprofiled_ms = (time.perf_counter_ns() - r0) / 1e6 / iters

    return breakdown_from_trace(
        json.loads(trace.read_text()),
        iters=iters,
        wall_ms=wall_ms,
        top_n=top_n,
        unprofiled_wall_ms=unprofiled_ms,
        extra_notes=[f"ORT trace: {trace}", f"providers: {', '.join(sess.get_providers())}"],
    )


def _interval(event: Mapping[str, Any]) -> Interval:
    start = float(event["ts"])
    return (start, start + float(event["dur"]))


def breakdown_from_trace(
    events: list[dict[str, Any]],
    iters: int,
    wall_ms: float,
    top_n: int = 10,
    unprofiled_wall_ms: float | None = None,
    extra_notes: Sequence[str] = (),
) -> Breakdown:
    """Split `wall_ms` using an ORT trace whose last `iters` model_run events were timed.

    Separate from profile_ort so it can be tested on a hand-written trace.
    """
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: float(e["ts"]),
    )
    if len(runs) < iters:
        raise RuntimeError(f"the ORT trace has {len(runs)} model_run events, expected {iters}")
    timed = runs[len(runs) - iters :]
    run_ivs = [_interval(e) for e in timed]
    span: Interval = (run_ivs[0][0], max(end for _, end in run_ivs))
    nodes = [
        e
        for e in events
        if e.get("cat") == "Node"
        and str(e.get("name", "")).endswith("_kernel_time")
        and span[0] <= float(e["ts"]) < span[1]
    ]
    kernels_us = length(intersect((_interval(e) for e in nodes), run_ivs))
    span_us = span[1] - span[0]
    in_runs_us = length(run_ivs)
    executes = [
        _interval(e)
        for e in events
        if e.get("cat") == "Session"
        and str(e.get("name", "")).endswith("Executor::Execute")
        and span[0] <= float(e["ts"]) < span[1]
    ]
    execute_us = length(executes) if executes else in_runs_us

    per = 1e3 * iters  # us over all iterations -> ms per iteration
    notes = [
        "overhead split: "
        f"executor {(execute_us - kernels_us) / per:.3f} ms, "
        f"session (checks, output allocation) {(in_runs_us - execute_us) / per:.3f} ms, "
        f"Python binding between runs {(span_us - in_runs_us) / per:.3f} ms per iter",
        "the remainder is one run's binding edges and the loop, outside the ORT trace",
    ]
    if unprofiled_wall_ms:
        extra = wall_ms - unprofiled_wall_ms
        notes.append(
            f"unprofiled wall {unprofiled_wall_ms:.3f} ms/iter: ORT profiling adds "
            f"{extra:+.3f} ms/iter ({extra / unprofiled_wall_ms:+.0%})"
        )
    notes.extend(extra_notes)
    rows = [
        (str(e.get("args", {}).get("op_name", e["name"])), float(e["dur"]) / 1e3) for e in nodes
    ]
    return Breakdown(
        method="onnxruntime profiler (model_run / node kernel_time)",
        iters=iters,
        wall_ms=wall_ms,
        parts_ms={"kernels": kernels_us / per, "overhead": (span_us - kernels_us) / per},
        top_ops=top_ops(rows, wall_ms * iters, top_n),
        notes=notes,
        unprofiled_wall_ms=unprofiled_wall_ms,
    )
