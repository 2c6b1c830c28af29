"""Which cells a screening keeps, which finalist wins, and when two are too close to tell
apart without measuring them side by side.

A screening is one short process per cell: its figures may be off by the `margin`, so a
cell is pruned only when it breaks a bound, or trails the best cell, by more than that.
Finalists are then measured in full and judged without a margin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stackcost.advise.constraints import OBJECTIVES, Constraints, violations
from stackcost.advise.estimate import ESTIMATED, interpolated
from stackcost.advise.evidence import Evidence, search_key

if TYPE_CHECKING:
    from stackcost.cell import Cell

# Statuses whose timings may be used; anything else is a reason the cell is out. An
# estimate's figures may prune it, never recommend it, and never set the best.
USABLE = ("ok", "unstable", ESTIMATED)


@dataclass(frozen=True)
class Decision:
    """What a phase decided about one cell: `kept`, or why not."""

    key: str
    kept: bool
    why: str = ""
    bound: bool = False  # pruned for a bound it broke (not for trailing the best)


def _behind(value: float, best: float, objective: str) -> float:
    """How far `value` trails `best`, as a fraction (0 when it is the best)."""
    if OBJECTIVES[objective] == "lower":
        return value / best - 1
    return best / value - 1


def screen(
    evidence: list[Evidence], bounds: Constraints, objective: str, margin: float
) -> dict[str, Decision]:
    """Each screened cell kept or pruned, with the reason in words."""
    out: dict[str, Decision] = {}
    candidates = []
    for e in evidence:
        if e.status not in USABLE or e.value(objective) is None:
            out[e.key] = Decision(e.key, False, _why_out(e))
            continue
        broken = violations(e.tail_ms, e.throughput, e.memory_bytes, bounds, margin, e.ttft_ms)
        if broken:
            out[e.key] = Decision(e.key, False, "breaks " + "; ".join(broken), bound=True)
            continue
        candidates.append(e)
    if candidates:
        measured = [e for e in candidates if e.status != ESTIMATED] or candidates
        best = min(measured, key=lambda e: _rank_value(e, objective))
        for e in candidates:
            value, top, reach = e.value(objective), best.value(objective), e.reach(objective)
            if _behind(reach, top, objective) > margin:  # type: ignore[arg-type]
                could = f"; it may hold up to {reach / top:.3g}×" if reach != value else ""  # type: ignore[operator]
                out[e.key] = Decision(
                    e.key,
                    False,
                    f"dominated: {value / top:.3g}× the {objective} of {best.label}"  # type: ignore[operator]
                    f"{could} (margin {margin:.0%})",
                )
            else:
                out[e.key] = Decision(e.key, True)
    return out


def _why_out(e: Evidence) -> str:
    """Why a cell without a usable figure is out: its status and reason (an `ok` served
    cell that held no rate within the SLO: the reason alone)."""
    if e.status == "ok" and e.reason:
        return e.reason
    return f"{e.status}: {e.reason}".rstrip(": ")


def _rank_value(e: Evidence, objective: str, reach: bool = False) -> float:
    """The sort key of `e`'s figure on the objective (best first); by what it could
    reach (Evidence.reach) when `reach`."""
    value = e.reach(objective) if reach else e.value(objective)
    assert value is not None
    return value if OBJECTIVES[objective] == "lower" else -value


def finalists(
    evidence: list[Evidence], decisions: dict[str, Decision], objective: str, count: int
) -> list[Evidence]:
    """The best `count` usable cells that meet the bounds, best first: the kept ones,
    then cells beyond the margin, so that an unfit leader leaves a measured fallback."""
    meets = [
        e
        for e in evidence
        if e.status in USABLE
        and e.value(objective) is not None
        and not decisions.get(e.key, Decision(e.key, False, bound=True)).bound
    ]
    # By what each could reach: a served cell's rate by the ceiling its short sweep leaves.
    return sorted(meets, key=lambda e: _rank_value(e, objective, reach=True))[:count]


def eligible(
    evidence: list[Evidence], bounds: Constraints, enough: int | None = None
) -> dict[str, str]:
    """Each finalist's fitness to be recommended: '' when it may be, else why not. `ok`
    evidence qualifies; so does a cell `unstable` only because its processes differ
    (every one ok), once `enough` of them were measured: its speed varies between
    processes, and more would not make it agree. A `disturbed` cell, or one whose time
    cap or warm-up made it unstable, is not good enough."""
    out = {}
    for e in evidence:
        varies = enough is not None and e.between_processes and e.repetitions >= enough
        if (e.status != "ok" and not varies) or e.median_ms is None:
            out[e.key] = _why_out(e)
            continue
        broken = violations(e.tail_ms, e.throughput, e.memory_bytes, bounds, ttft_ms=e.ttft_ms)
        out[e.key] = ("breaks " + "; ".join(broken)) if broken else ""
    return out


def ranked(evidence: list[Evidence], objective: str) -> list[Evidence]:
    return sorted(evidence, key=lambda e: _rank_value(e, objective))


def too_close(first: Evidence, second: Evidence, objective: str, threshold: float) -> bool:
    """Whether the two best finalists are within the gate's resolution: their objective
    differs by less than `threshold`, or their intervals over repetitions overlap. Memory
    does not drift as time does: it is compared as measured."""
    a, b = first.value(objective), second.value(objective)
    if a is None or b is None:
        return False
    if _behind(b, a, objective) < threshold:
        return True
    if objective == "memory" or first.interval is None or second.interval is None:
        return False
    (lo_a, hi_a), (lo_b, hi_b) = (_interval(e, objective) for e in (first, second))
    return lo_a <= hi_b and lo_b <= hi_a


def _interval(e: Evidence, objective: str) -> tuple[float, float]:
    """The evidence's interval in the objective's units (samples/s for throughput)."""
    assert e.interval is not None
    low, high = e.interval
    if objective == "throughput":
        return e.batch_size * 1000.0 / high, e.batch_size * 1000.0 / low
    return low, high


def coarse(cells: list[Cell]) -> tuple[list[Cell], list[Cell]]:
    """The cells a first, coarse screening pass measures, and the rest: every rung and
    precision at its smallest and largest batch and its most threads, where latency and
    throughput are at their best. A (rung, precision) that is out at both ends is not
    worth its middle."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.backend, c.precision), []).append(c)
    first: list[Cell] = []
    for group in groups.values():
        batches = [c.batch_size for c in group]
        most = max(c.threads for c in group)
        ends = {min(batches), max(batches)}
        first += [c for c in group if c.batch_size in ends and c.threads == most]
    keys = {search_key(c) for c in first}
    return first, [c for c in cells if search_key(c) not in keys]


def promising(evidence: list[Evidence], decisions: dict[str, Decision]) -> set[tuple[str, str]]:
    """The (rung, precision) pairs worth their middle batches: a cell the coarse pass
    kept, or one it pruned only for a bound (a batch between the ends may meet it: less
    latency and memory than the largest, more throughput than the smallest)."""
    return {
        (e.backend, e.precision)
        for e in evidence
        if decisions[e.key].kept or decisions[e.key].bound
    }


def pair_order(evidence: list[Evidence], objective: str) -> dict[tuple[str, str], int]:
    """The pairs in the order their best coarse cell ranks on the objective: the rest of
    the screening spends the budget on the most promising first."""
    best = ranked([e for e in evidence if e.value(objective) is not None], objective)
    order: dict[tuple[str, str], int] = {}
    for e in best:
        order.setdefault((e.backend, e.precision), len(order))
    return order


def group(c: Cell | Evidence) -> tuple:
    """What the cells of one screening process share: rung, precision, threads, sizes."""
    return (c.backend, c.precision, c.threads, tuple(sorted(c.sizes.items())))


def estimates(evidence: list[Evidence], cells: list[Cell]) -> dict[str, Evidence]:
    """Each of `cells` that lies between two usable screened batches of its own rung,
    precision, threads and sizes, estimated there (advise.estimate): the nearest below and
    the nearest above."""
    usable: dict[tuple, list[Evidence]] = {}
    for e in evidence:
        if e.status in ("ok", "unstable") and e.median_ms is not None:
            usable.setdefault(group(e), []).append(e)
    out = {}
    for c in cells:
        ends = usable.get(group(c), [])
        below = [e for e in ends if e.batch_size < c.batch_size]
        above = [e for e in ends if e.batch_size > c.batch_size]
        if below and above:
            low = max(below, key=lambda e: e.batch_size)
            high = min(above, key=lambda e: e.batch_size)
            if (estimate := interpolated(low, high, search_key(c), c.batch_size)) is not None:
                out[search_key(c)] = estimate
    return out


def sibling(c: Cell | Evidence) -> tuple:
    """What a cell shares with its siblings at other thread counts."""
    return (c.backend, c.precision, tuple(sorted(c.sizes.items())), c.batch_size)


def most_threads(evidence: list[Evidence]) -> dict[tuple, Evidence]:
    """The evidence at the most threads of each sibling set (advise.search.sibling)."""
    out: dict[tuple, Evidence] = {}
    for e in evidence:
        key = sibling(e)
        if key not in out or e.threads > out[key].threads:
            out[key] = e
    return out


def screen_check(
    screened: list[Evidence], final: list[Evidence], objective: str, margin: float
) -> str:
    """The screening checked against the finalists' full measurements: how far each full
    figure moved from its screening one, and whether that stayed within the margin the
    pruning trusted."""
    moved = []
    by_key = {e.key: e for e in screened}
    for f in final:
        s = by_key.get(f.key)
        a, b = (s.value(objective) if s else None), f.value(objective)
        if a and b:
            moved.append(b / a - 1)
    if not moved:
        return ""
    span = f"{min(moved):+.1%} to {max(moved):+.1%}" if len(moved) > 1 else f"{moved[0]:+.1%}"
    verdict = (
        f"within the {margin:.0%} margin"
        if all(abs(m) <= margin for m in moved)
        else f"beyond the {margin:.0%} margin: the screening may have pruned a cell it should not"
    )
    return f"finalists in full against their screening: {span} in {objective}, {verdict}"
