"""advise's answer as the rows and lines every view of it shows."""

from __future__ import annotations

from dataclasses import dataclass, replace

from stackcost.advise.advice import Advice, Entry
from stackcost.advise.estimate import ESTIMATED
from stackcost.report.units import mib, ms, rate

HEADER = (
    "cell", "phase", "status", "median", "tail", "throughput", "peak RSS", "quality lost",
    "decision",
)  # fmt: skip
# Token generation: a call is one decode step (TPOT), and the time to the first token.
TOKENS_HEADER = (
    "cell", "phase", "status", "TPOT", "tail", "tokens/s", "TTFT", "peak RSS", "quality lost",
    "decision",
)  # fmt: skip

# Served under load: each engine's highest request rate held within the SLO, and its p99
# TPOT and TTFT at that rate.
SERVE_HEADER = (
    "cell", "phase", "status", "rate held", "TPOT p99", "TTFT p99", "peak RSS", "decision",
)  # fmt: skip


def header(advice: Advice) -> tuple[str, ...]:
    return {"generate": TOKENS_HEADER, "serve": SERVE_HEADER}.get(advice.mode, HEADER)


def row(entry: Entry, advice: Advice) -> list[str]:
    """One cell's row: what it measured where it was measured, and what became of it."""
    if advice.mode == "serve":
        return [
            entry.label, entry.phase, entry.status, rate(entry.throughput, "req/s"),
            ms(entry.tail_ms), ms(entry.ttft_ms), mib(entry.memory_bytes), entry.decision,
        ]  # fmt: skip
    ttft = [ms(entry.ttft_ms)] if advice.mode == "generate" else []
    return [
        entry.label,
        entry.phase,
        entry.status,
        ms(entry.median_ms),
        ms(entry.tail_ms),
        rate(entry.throughput),
        *ttft,
        mib(entry.memory_bytes),
        entry.quality or "-",
        entry.decision,
    ]


def headline(advice: Advice) -> str:
    """'deploy onnxruntime int8 b1 t2: median …' or 'nothing to recommend: why'."""
    e = advice.recommended
    if e is None:
        return f"nothing to recommend: {advice.why_none}"
    pct = advice.constraints.get("percentile", "p99")
    if advice.mode == "serve":
        figures = (
            f"holds {rate(e.throughput, 'req/s')} within the SLO (there TPOT p99 "
            f"{ms(e.tail_ms)}, TTFT p99 {ms(e.ttft_ms)})"
        )
    elif advice.mode == "generate":
        figures = (
            f"TPOT median {ms(e.median_ms)}, {pct} {ms(e.tail_ms)}, TTFT {ms(e.ttft_ms)}, "
            f"{rate(e.throughput, 'tokens/s')}"
        )
    else:
        figures = f"median {ms(e.median_ms)}, {pct} {ms(e.tail_ms)}, " + rate(
            e.throughput, "samples/s"
        )
    return (
        f"deploy {e.label}: {figures}, peak RSS {mib(e.memory_bytes)} ({e.repetitions} processes)"
    )


def lines(advice: Advice) -> list[str]:
    """What follows the headline: how it was decided, how to reproduce it, what was not
    tried, and the margin the screening pruned with."""
    out = [f"objective: {advice.objective}; bounds: {advice.constraints_words}"]
    if advice.decided_by:
        out.append(f"decided by: {advice.decided_by}")
    if advice.reproduce:
        out.append(f"reproduce: {advice.reproduce}")
    if advice.artifact:
        out.append(f"artifact: {advice.artifact} ({advice.artifact_note})")
    elif advice.artifact_note:
        out.append(f"artifact: none ({advice.artifact_note})")
    out += [f"not tried: {n}" for n in advice.not_tried]
    if advice.screen_check:
        out.append(f"screening checked: {advice.screen_check}")
    if advice.constraints.get("max_quality_loss") is not None:
        out.append(
            "quality lost: held out against eager fp32 (accuracy points, or a decoder's "
            "perplexity %), scored for the quantized precisions that could win; fp32 is "
            "verified against eager fp32 in every process"
        )
    short = "one short sweep" if advice.mode == "serve" else "one short process"
    out.append(
        f"screening pruned with a {advice.margin:.0%} margin ({short} a cell); "
        f"finalists measured in full; a tie is within {advice.threshold:.0%}"
    )
    return out


@dataclass(frozen=True)
class Point:
    """One measured cell on the Pareto figure: latency against quality lost (or, without a
    quality bound, against peak RSS), its memory as the marker's size."""

    label: str
    backend: str
    precision: str
    latency_ms: float
    quality_loss: float | None
    memory_mib: float | None
    role: str  # "recommended", "runner-up", or "" (a finalist or a screened cell)
    on_front: bool = False


def pareto_points(advice: Advice) -> list[Point]:
    """The measured cells (screened or in full, never estimated), each with its latest
    figures, those on the front (no other cell is at once faster and lost less) marked."""
    latest: dict[str, Point] = {}
    for e in advice.entries:
        if e.median_ms is None or e.status == ESTIMATED:
            continue
        role = e.decision if e.decision in ("recommended", "runner-up") else ""
        memory = e.memory_bytes / 2**20 if e.memory_bytes is not None else None
        point = Point(
            e.label, e.backend, e.precision, e.median_ms, e.quality_loss, memory, role
        )  # fmt: skip
        if e.label not in latest or e.phase == "final":
            latest[e.label] = point
    points = list(latest.values())
    axis = second_axis(advice)
    return [replace(p, on_front=_on_front(p, points, axis)) for p in points]


def pareto_axes(advice: Advice) -> tuple[str, str]:
    """The figure's axis titles: one call's latency, and what the cells are traded on."""
    x = {
        "generate": "TPOT median, ms",
        "serve": "time per request at the rate held, ms (1000 / req/s)",
    }.get(advice.mode, "median latency of a call, ms")
    if second_axis(advice) == "quality":
        return x, "quality lost held out (accuracy points; a decoder's perplexity %)"
    return x, "peak RSS, MiB"


def pareto_title(advice: Advice) -> str:
    """The figure's title, in the HTML report and the PNG alike."""
    traded = "quality lost" if second_axis(advice) == "quality" else "memory"
    return (
        f"{advice.model}: latency against {traded} "
        "(marker size: peak RSS; marked: recommended and runner-up)"
    )


def front(points: list[Point]) -> list[Point]:
    """The points on the Pareto front, fastest first (the line drawn through them)."""
    return sorted((p for p in points if p.on_front), key=lambda p: p.latency_ms)


def second_axis(advice: Advice) -> str:
    judged = advice.constraints.get("max_quality_loss") is not None
    return "quality" if judged else "memory"


def second_value(point: Point, axis: str) -> float | None:
    return point.quality_loss if axis == "quality" else point.memory_mib


def _on_front(p: Point, points: list[Point], axis: str) -> bool:
    mine = second_value(p, axis)
    if mine is None:
        return False
    for q in points:
        other = second_value(q, axis)
        if q is p or other is None:
            continue
        if (
            q.latency_ms <= p.latency_ms
            and other <= mine
            and (q.latency_ms, other)
            != (
                p.latency_ms,
                mine,
            )
        ):
            return False
    return True
