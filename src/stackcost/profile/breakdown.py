"""Where the time of a measured step goes: the data model and the arithmetic it shares.

A breakdown splits the per-iteration wall time of a step into named parts (on CPU
"kernels" and "overhead"; on GPU "device compute", "host<->device copies", "idle").
The wall comes from perf_counter_ns around the profiled iterations; the parts come from
the profiler's own timeline. The two clocks are independent, so whatever the timeline
did not see is kept as an explicit remainder rather than folded into a part: a large
remainder means the parts cannot be trusted, and hiding it would hide that.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

Interval = tuple[float, float]

CPU_PARTS = ("kernels", "overhead", "graph frames (ops not recorded)")
GPU_PARTS = ("device compute", "host<->device copies", "idle")


class OpRow(BaseModel):
    """One row of the "top ops" table: all events of one name over the profiled iterations."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    calls: int  # over all profiled iterations, not per iteration
    self_ms: float  # self time summed over all profiled iterations
    share: float  # self_ms / (wall_ms * iters): the fraction of the measured wall


class Breakdown(BaseModel):
    """Per-iteration split of a step's wall time into parts, plus what the parts missed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str  # how the parts were obtained, e.g. "torch.profiler, CPU activities"
    iters: int  # profiled iterations the numbers are averaged over
    wall_ms: float  # per iteration: perf_counter_ns around the profiled loop / iters
    parts_ms: dict[str, float]  # per iteration, from the profiler's timeline
    remainder_ms: float  # wall_ms - sum(parts_ms): filled in when not given
    top_ops: list[OpRow] = []
    notes: list[str] = []
    # The same step timed without the profiler. The profiler's own cost lands in the
    # parts (on CPU: in "overhead"), so wall_ms - unprofiled_wall_ms says how much of it
    # is instrumentation. None when no reference was taken.
    unprofiled_wall_ms: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill_remainder(cls, data: Any) -> Any:
        # The remainder is derived, never free: compute it when absent, reject it when it
        # disagrees with wall and parts (a hand-edited or corrupted record).
        if not isinstance(data, dict) or "wall_ms" not in data or "parts_ms" not in data:
            return data
        expected = float(data["wall_ms"]) - sum(float(v) for v in data["parts_ms"].values())
        given = data.get("remainder_ms")
        if given is None:
            return {**data, "remainder_ms": expected}
        if abs(float(given) - expected) > 1e-6 * max(1.0, abs(float(data["wall_ms"]))):
            raise ValueError(f"remainder_ms {given} != wall_ms - sum(parts_ms) = {expected}")
        return data

    def covered(self) -> float:
        """The fraction of the wall the parts account for (1.0 = all of it)."""
        return sum(self.parts_ms.values()) / self.wall_ms if self.wall_ms > 0 else 0.0

    def check(self, tolerance: float = 0.05) -> bool:
        """True when the parts sum to the wall within `tolerance` (a fraction of the wall)."""
        return abs(self.remainder_ms) <= tolerance * self.wall_ms

    def summary(self) -> str:
        """A few plain-text lines: parts, remainder, top ops; for logs and the CLI."""
        lines = [f"{self.method}: {self.wall_ms:.3f} ms/iter over {self.iters} iters"]
        for name, ms in [*self.parts_ms.items(), ("remainder", self.remainder_ms)]:
            share = ms / self.wall_ms if self.wall_ms > 0 else 0.0
            lines.append(f"  {name:<22} {ms:9.3f} ms  {share:6.1%}")
        if self.unprofiled_wall_ms is not None:
            lines.append(f"  (unprofiled wall {self.unprofiled_wall_ms:.3f} ms/iter)")
        for row in self.top_ops:
            lines.append(
                f"    {row.name:<40} {row.calls:6d} calls {row.self_ms:9.3f} ms {row.share:6.1%}"
            )
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping union of `intervals` (empty ones dropped)."""
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def length(intervals: Iterable[Interval]) -> float:
    """Total length of the union of `intervals`: overlaps are counted once."""
    return sum(end - start for start, end in merge(intervals))


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The union of `a` intersected with the union of `b`, merged."""
    ma, mb = merge(a), merge(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(ma) and j < len(mb):
        start, end = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        if end > start:
            out.append((start, end))
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(interval: Interval, holes: Iterable[Interval]) -> list[Interval]:
    """`interval` minus the union of `holes`: e.g. an op's own time minus its children's."""
    start, end = interval
    out: list[Interval] = []
    cursor = start
    for h_start, h_end in merge(holes):
        if h_end <= cursor or h_start >= end:
            continue
        if h_start > cursor:
            out.append((cursor, h_start))
        cursor = max(cursor, h_end)
    if cursor < end:
        out.append((cursor, end))
    return out


def top_ops(rows: Iterable[tuple[str, float]], total_ms: float, n: int = 10) -> list[OpRow]:
    """Group (name, self_ms) pairs by name and keep the `n` largest by self time.

    `total_ms` is the wall over all profiled iterations, so shares are of the measured
    time, not of the profiler's (which would hide the overhead the table exists to show).
    """
    calls: dict[str, int] = defaultdict(int)
    self_ms: dict[str, float] = defaultdict(float)
    for name, ms in rows:
        calls[name] += 1
        self_ms[name] += ms
    ranked = sorted(self_ms, key=lambda k: (-self_ms[k], k))[:n]
    return [
        OpRow(
            name=k,
            calls=calls[k],
            self_ms=self_ms[k],
            share=self_ms[k] / total_ms if total_ms > 0 else 0.0,
        )
        for k in ranked
    ]
