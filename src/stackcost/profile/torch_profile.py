"""Breakdown of an eager PyTorch step from torch.profiler's timeline.

CPU: "kernels" is the time spent inside operator kernels, "overhead" the rest of the
step (Python, dispatch, allocation, the profiler's own instrumentation). An op's time
counts as kernel time only for its *self* part (its interval minus its children's), and
only when the op does the work itself; three kinds of op are overhead instead:

- allocation: aten::empty and friends (the issue counts allocation as overhead);
- metadata: views and queries (aten::view, as_strided, t, _nnpack_available, ...) that
  touch no data;
- dispatch wrappers: ops that only route to other ops (aten::conv2d -> convolution ->
  _convolution -> mkldnn_convolution), whose self time is argument handling and
  dispatch. Kept as an explicit list, because the dispatcher's registrations do not
  tell them apart (mkldnn_convolution is registered exactly like convolution).

Anything else in an op namespace (aten::, torchvision::, ...) counts, which includes the
dispatch cost inside a computing op (addmm's own argument checks): overhead is a lower
bound. Events outside op namespaces (record_function ranges, autograd::engine, optimizer
annotations) are overhead: their self time is Python and framework code.

Kernel time is the *union* of those self intervals across threads, so work on two
threads at once is not counted twice (CPU ops run on the calling thread and parallelize
inside the op, so in practice the intervals are disjoint).

The CPU split works on OpEvent, a neutral form of one host-side event, so the same
classification serves torch.profiler here and the Kineto trace a C++ program writes
(kineto_trace).

GPU: "device compute" is the union of CUDA kernel intervals, "host<->device copies" the
memcpy time not overlapped by compute, "idle" the rest of the step span.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from stackcost.profile.breakdown import (
    CPU_PARTS,
    Breakdown,
    Interval,
    intersect,
    length,
    merge,
    subtract,
    top_ops,
)

STEP_MARK = "stackcost.step"
WARMUP_MARK = "stackcost.warmup"
_MARKS = frozenset({STEP_MARK, WARMUP_MARK})

ALLOCATION_OPS = frozenset(
    f"aten::{n}"
    for n in (
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "resize_",
        "resize_as_",
        "_empty_affine_quantized",
        "set_",
    )
)
METADATA_OPS = frozenset(
    f"aten::{n}"
    for n in (
        "view",
        "_unsafe_view",
        "view_as",
        "_reshape_alias",
        "reshape",
        "flatten",
        "unflatten",
        "as_strided",
        "as_strided_",
        "expand",
        "expand_as",
        "t",
        "transpose",
        "permute",
        "squeeze",
        "unsqueeze",
        "slice",
        "select",
        "narrow",
        "split",
        "chunk",
        "unbind",
        "detach",
        "detach_",
        "alias",
        "lift_fresh",
        "contiguous",
        "resolve_conj",
        "resolve_neg",
        "_nnpack_available",
        "is_nonzero",
        "size",
        "stride",
        "numel",
        "dim",
    )
)
WRAPPER_OPS = frozenset(
    f"aten::{n}"
    for n in (
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "convolution",
        "_convolution",
        "thnn_conv2d",
        "batch_norm",
        "_batch_norm_impl_index",
        "instance_norm",
        "layer_norm",
        "group_norm",
        "linear",
        "matmul",
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "dropout",
        "relu",  # -> clamp_min on CPU
        "relu_",  # -> clamp_min_
        "to",
        "_to_copy",
        "type_as",
        "softmax",
        "log_softmax",
        "cross_entropy_loss",
        "scaled_dot_product_attention",
    )
)
# The part for self time of graph frames (TorchScript), whose ops the profiler cannot see.
UNRECORDED = CPU_PARTS[2]
# Namespaces of events that are framework code, not operators.
_FRAMEWORK_NAMESPACES = ("autograd::", "profiler::", "Optimizer.")

# CUDA activity names for host<->device transfers (Kineto's spelling).
_COPY_PREFIXES = ("Memcpy HtoD", "Memcpy DtoH", "Memcpy PtoP", "Memcpy HtoH")


@dataclass(frozen=True)
class OpEvent:
    """One host-side event of a profiler timeline, in microseconds.

    `children` are the intervals of the events nested directly inside it on its thread,
    as torch.profiler's FunctionEvent.cpu_children or rebuilt from a chrome trace.
    """

    name: str
    start_us: float
    end_us: float
    children: tuple[Interval, ...] = ()

    @property
    def interval(self) -> Interval:
        return (self.start_us, self.end_us)

    @property
    def self_us(self) -> float:
        """Duration minus the children's, as FunctionEvent.self_cpu_time_total."""
        return (self.end_us - self.start_us) - sum(end - start for start, end in self.children)


def is_kernel(name: str, leaf: bool = False) -> bool:
    """Whether an event's self time is kernel work (see the module docstring).

    A wrapper that called no other op (`leaf`) did the work itself after all (e.g. relu
    on an mkldnn tensor), so its self time counts.
    """
    if "::" not in name or name.startswith(_FRAMEWORK_NAMESPACES):
        return False
    if name in WRAPPER_OPS:
        return leaf
    return name not in ALLOCATION_OPS and name not in METADATA_OPS


def profile_step(
    step: Callable[[], Any],
    iters: int = 10,
    warmup: int = 2,
    top_n: int = 10,
    device: str = "cpu",
    reference: bool = True,
) -> Breakdown:
    """Run `step` `iters` times under torch.profiler and split its wall time.

    The `warmup` calls (at least one) run inside the profiler but outside the analysed
    range: first calls (primitive creation) and the profiler's own first iterations
    are up to twice as slow as steady state, and would land in "overhead". With
    `reference`, the step is then timed `iters` times without the profiler (synchronized
    the same way), to size the profiler's own cost.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    if iters < 1:
        raise ValueError("iters must be >= 1")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: use 'cpu' or 'cuda'")
    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
    # GPU work is asynchronous: synchronize inside each marker so an iteration's device
    # work is attributed to that iteration, and the perf_counter clock reads a finished step.
    sync = torch.cuda.synchronize if cuda else _nothing

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=False) as prof:
        for _ in range(max(warmup, 1)):
            with record_function(WARMUP_MARK):
                step()
                sync()
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            with record_function(STEP_MARK):
                step()
                sync()
        t1 = time.perf_counter_ns()
    wall_ms = (t1 - t0) / 1e6 / iters

    unprofiled_ms = None
    if reference:
        sync()
        r0 = time.perf_counter_ns()
        for _ in range(iters):
            step()
            sync()
        unprofiled_ms = (time.perf_counter_ns() - r0) / 1e6 / iters

    events = list(prof.events())
    if not cuda:
        return cpu_breakdown(
            _op_events(events),
            iters,
            wall_ms,
            unprofiled_ms,
            method="torch.profiler, CPU activities",
            top_n=top_n,
        )
    spans = step_spans(_op_events(events))
    parts, rows = _gpu_parts(events, spans, iters)
    return Breakdown(
        method="torch.profiler, CPU + CUDA activities",
        iters=iters,
        wall_ms=wall_ms,
        parts_ms=parts,
        top_ops=top_ops(rows, wall_ms * iters, top_n),
        notes=_step_notes(spans, iters, wall_ms, unprofiled_ms, absorbed_in="idle"),
        unprofiled_wall_ms=unprofiled_ms,
    )


def cpu_breakdown(
    events: Sequence[OpEvent],
    iters: int,
    wall_ms: float,
    unprofiled_ms: float | None,
    method: str,
    top_n: int = 10,
    extra_notes: Sequence[str] = (),
) -> Breakdown:
    """Split `wall_ms` (per iteration, timed around `iters` marked iterations) by the
    host-side `events` of the profiled pass; only events starting inside a STEP_MARK
    range count, so the warm-up iterations may be among them."""
    spans = step_spans(events)
    parts, rows = _cpu_parts(events, spans, iters)
    notes = _step_notes(spans, iters, wall_ms, unprofiled_ms, absorbed_in="overhead")
    notes.append(
        "kernels = self time of computing ops; allocation, view/metadata ops, dispatch "
        "wrappers, Python and framework code and the profiler's instrumentation are overhead"
    )
    notes.extend(extra_notes)
    return Breakdown(
        method=method,
        iters=iters,
        wall_ms=wall_ms,
        parts_ms=parts,
        top_ops=top_ops(rows, wall_ms * iters, top_n),
        notes=notes,
        unprofiled_wall_ms=unprofiled_ms,
    )


def step_spans(events: Iterable[OpEvent]) -> list[Interval]:
    """The merged intervals of the STEP_MARK ranges; RuntimeError when there are none."""
    spans = merge(e.interval for e in events if e.name == STEP_MARK)
    if not spans:
        raise RuntimeError(f"the profiler recorded no {STEP_MARK!r} ranges")
    return spans


def _step_notes(
    spans: list[Interval],
    iters: int,
    wall_ms: float,
    unprofiled_ms: float | None,
    absorbed_in: str,
) -> list[str]:
    span_ms = length(spans) / 1e3 / iters
    notes = [
        f"profiler step span {span_ms:.3f} ms/iter; the remainder is time outside the "
        "marked iterations (loop, marker entry/exit)",
    ]
    if unprofiled_ms:
        extra = wall_ms - unprofiled_ms
        notes.append(
            f"unprofiled wall {unprofiled_ms:.3f} ms/iter: the profiler adds "
            f"{extra:+.3f} ms/iter ({extra / unprofiled_ms:+.0%}), counted in {absorbed_in}"
        )
    return notes


def _nothing() -> None:
    pass


def _interval(event: Any) -> Interval:
    """A FunctionEvent's (start, end) in microseconds."""
    return (float(event.time_range.start), float(event.time_range.end))


def _op_events(events: Iterable[Any]) -> list[OpEvent]:
    """torch.profiler's host-side FunctionEvents as OpEvents."""
    import torch

    return [
        OpEvent(e.name, *_interval(e), children=tuple(_interval(c) for c in e.cpu_children))
        for e in events
        if e.device_type == torch.autograd.DeviceType.CPU
    ]


def _inside(spans: list[Interval]) -> Callable[[float], bool]:
    """A predicate: does a time (an event's start) fall within the (merged, sorted) `spans`?"""
    starts = [s for s, _ in spans]

    def check(t: float) -> bool:
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t < spans[i][1]

    return check


def _cpu_parts(
    events: Iterable[OpEvent], spans: list[Interval], iters: int
) -> tuple[dict[str, float], list[tuple[str, float]]]:
    inside = _inside(spans)
    cpu = [e for e in events if e.name not in _MARKS and inside(e.start_us)]
    kernel_ivs: list[Interval] = []
    for e in cpu:
        if is_kernel(e.name, leaf=not e.children):
            kernel_ivs.extend(subtract(e.interval, e.children))
    # Clip to the step spans: an op started in the last iteration cannot run past it,
    # but a clock mismatch between threads should not produce kernel time outside a step.
    kernels_us = length(intersect(kernel_ivs, spans))
    span_us = length(spans)
    # A TorchScript graph runs as a frame named after its method ("forward"); ops it
    # dispatches without the profiler's hooks (frozen, prepacked oneDNN convolutions) are
    # invisible and land in that frame's self time. That time is kernels and interpreter
    # mixed, so it is its own part rather than being called overhead.
    frames_us = sum(
        e.self_us
        for e in cpu
        if "::" not in e.name and not e.name.startswith(_FRAMEWORK_NAMESPACES)
    )
    frames_us = min(frames_us, span_us - kernels_us)
    parts = {
        "kernels": kernels_us / 1e3 / iters,
        "overhead": (span_us - kernels_us - frames_us) / 1e3 / iters,
    }
    if frames_us > 0.01 * span_us:
        parts[UNRECORDED] = frames_us / 1e3 / iters
    else:
        parts["overhead"] += frames_us / 1e3 / iters
    rows = [(e.name, e.self_us / 1e3) for e in cpu]
    return parts, rows


def _gpu_parts(
    events: list[Any], spans: list[Interval], iters: int
) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """Device-side split; Kineto puts CUDA activities on the host timeline (approximately)."""
    import torch

    device_events = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    copies = [e for e in device_events if e.name.startswith(_COPY_PREFIXES)]
    compute = [e for e in device_events if not e.name.startswith(_COPY_PREFIXES)]
    compute_u = intersect((_interval(e) for e in compute), spans)
    copies_u = intersect((_interval(e) for e in copies), spans)
    compute_us = length(compute_u)
    # Copies overlapped by compute are already counted in compute: only the rest is copy time.
    copy_us = length(copies_u) - length(intersect(copies_u, compute_u))
    busy_us = length([*compute_u, *copies_u])
    span_us = length(spans)
    parts = {
        "device compute": compute_us / 1e3 / iters,
        "host<->device copies": copy_us / 1e3 / iters,
        "idle": (span_us - busy_us) / 1e3 / iters,
    }
    inside = _inside(spans)
    rows = [
        (e.name, (e.time_range.end - e.time_range.start) / 1e3)
        for e in device_events
        if inside(float(e.time_range.start))
    ]
    return parts, rows
