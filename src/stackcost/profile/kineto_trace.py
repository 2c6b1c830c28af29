"""Breakdown of a C++ program's profiled pass from the Kineto trace it wrote.

stackcost_libtorch (kinds nn and jit) runs its profiled iterations under the Kineto
profiler, CPU activities only, each inside a "stackcost.step" user scope after two
"stackcost.warmup" ones, saves the chrome trace to the answer's profile_path and reports
the steady_clock time of the marked iterations (details: profile_iters, profile_wall_ns).

The trace is flat: its host events ("X" events of category cpu_op and user_annotation)
are nested again per thread by their intervals, as torch.profiler nests its
FunctionEvents, and then split with torch_profile's CPU classification, so a C++ cell's
"kernels" and "overhead" mean what they mean for the Python torch backends.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from stackcost.profile.breakdown import Breakdown
from stackcost.profile.torch_profile import STEP_MARK, OpEvent, cpu_breakdown

# Host-side events; "Trace" is the profiler's own whole-session span, not an event.
HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
METHOD = "torch profiler (Kineto) inside the C++ program, CPU activities"


def kineto_breakdown(
    answer: Mapping[str, Any], unprofiled_ms: float | None, top_n: int = 10
) -> Breakdown:
    """The split of a native program's profiled iterations, from its answer.

    Raises RuntimeError (one line) when the answer has no profiled pass, or its trace is
    missing, unreadable or has no step marks.
    """
    details = answer.get("details", {})
    path = answer.get("profile_path")
    iters = int(details.get("profile_iters", 0))
    if path is None or iters < 1 or "profile_wall_ns" not in details:
        raise RuntimeError(
            "the program's answer has no profiled pass (profile_path, profile_iters, "
            "profile_wall_ns)"
        )
    wall_ms = float(details["profile_wall_ns"]) / 1e6 / iters
    events = read_trace(Path(path))
    if not any(e.name == STEP_MARK for e in events):
        raise RuntimeError(f"the Kineto trace {path} has no {STEP_MARK!r} ranges")
    notes = [f"Kineto trace: {path}"]
    device = str(details.get("device", "cpu"))
    if device != "cpu":
        notes.append(
            f"CPU activities only: on {device} op times are host-side (launch, and the "
            "wait in synchronize), not device compute"
        )
    return cpu_breakdown(events, iters, wall_ms, unprofiled_ms, METHOD, top_n, notes)


def read_trace(path: Path) -> list[OpEvent]:
    """The host events of a chrome-trace JSON file, nested per thread."""
    try:
        # Decimal: ts is absolute microseconds with ns digits, too many for a float to keep
        # exactly, and nesting compares a child's end with its parent's.
        data = json.loads(path.read_text(), parse_float=Decimal)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"cannot read the Kineto trace {path}: {exc}") from exc
    raw = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise RuntimeError(f"the Kineto trace {path} has no traceEvents list")
    return trace_events(raw)


def trace_events(raw: Iterable[Mapping[str, Any]]) -> list[OpEvent]:
    """Chrome-trace events as OpEvents: host "X" events, children rebuilt per thread."""
    threads: dict[tuple[str, str], list[tuple[int, int, str]]] = defaultdict(list)
    for e in raw:
        if e.get("ph") != "X" or e.get("cat") not in HOST_CATEGORIES:
            continue
        start = _ns(e["ts"])
        threads[(str(e.get("pid")), str(e.get("tid")))].append(
            (start, start + _ns(e.get("dur", 0)), str(e["name"]))
        )
    return [op for spans in threads.values() for op in _nest(spans)]


def _ns(us: Any) -> int:
    """Microseconds (int, float or Decimal) as integer nanoseconds, exactly."""
    return round(Decimal(str(us)) * 1000)


def _nest(spans: list[tuple[int, int, str]]) -> list[OpEvent]:
    """One thread's (start_ns, end_ns, name) as OpEvents with their direct children.

    The rules of torch.profiler's own tree (EventList._populate_cpu_children and
    _remove_dup_nodes), so both paths classify the same events: in (start, -end) order an
    event's parent is the innermost open event enclosing it; an only child with its
    parent's name (a redispatch of the same op) is merged into the parent.
    """
    ordered = sorted(spans, key=lambda s: (s[0], -s[1]))
    parent = [-1] * len(ordered)
    kids: list[list[int]] = [[] for _ in ordered]
    stack: list[int] = []
    for i, (start, end, _) in enumerate(ordered):
        while stack and (start >= ordered[stack[-1]][1] or end > ordered[stack[-1]][1]):
            stack.pop()
        if stack:
            parent[i] = stack[-1]
            kids[stack[-1]].append(i)
        stack.append(i)
    merged = [False] * len(ordered)
    for i, p in enumerate(parent):  # parents come first: a chain folds into its head
        if p >= 0 and ordered[p][2] == ordered[i][2] and len(kids[p]) == 1:
            kids[p] = kids[i]
            for k in kids[i]:
                parent[k] = p
            merged[i] = True
    return [
        OpEvent(name, start / 1e3, end / 1e3, tuple(_us(ordered[k]) for k in kids[i]))
        for i, (start, end, name) in enumerate(ordered)
        if not merged[i]
    ]


def _us(span: tuple[int, int, str]) -> tuple[float, float]:
    return (span[0] / 1e3, span[1] / 1e3)
