"""advise's answer as the rows and lines every view of it shows."""

from __future__ import annotations

from stackcost.advise.advice import Advice, Entry
from stackcost.report.units import mib, ms, rate

HEADER = (
    "cell", "phase", "status", "median", "tail", "throughput", "peak RSS", "quality lost",
    "decision",
)  # fmt: skip


def row(entry: Entry) -> list[str]:
    """One cell's row: what it measured where it was measured, and what became of it."""
    return [
        entry.label,
        entry.phase,
        entry.status,
        ms(entry.median_ms),
        ms(entry.tail_ms),
        rate(entry.throughput),
        mib(entry.memory_bytes),
        entry.quality or "-",
        entry.decision,
    ]


def headline(advice: Advice) -> str:
    """'deploy onnxruntime int8 b1 t2: median …' or 'nothing to recommend: why'."""
    e = advice.recommended
    if e is None:
        return f"nothing to recommend: {advice.why_none}"
    return (
        f"deploy {e.label}: median {ms(e.median_ms)}, "
        f"{advice.constraints.get('percentile', 'p99')} {ms(e.tail_ms)}, "
        f"{rate(e.throughput, 'samples/s')}, peak RSS {mib(e.memory_bytes)} "
        f"({e.repetitions} processes)"
    )


def lines(advice: Advice) -> list[str]:
    """What follows the headline: how it was decided, how to reproduce it, what was not
    tried, and the margin the screening pruned with."""
    out = [f"objective: {advice.objective}; bounds: {advice.constraints_words}"]
    if advice.decided_by:
        out.append(f"decided by: {advice.decided_by}")
    if advice.reproduce:
        out.append(f"reproduce: {advice.reproduce}")
    out += [f"not tried: {n}" for n in advice.not_tried]
    if advice.screen_check:
        out.append(f"screening checked: {advice.screen_check}")
    if advice.constraints.get("max_quality_loss") is not None:
        out.append(
            "quality lost: held out against eager fp32 (accuracy points, or a decoder's "
            "perplexity %), scored for the quantized precisions that could win; fp32 is "
            "verified against eager fp32 in every process"
        )
    out.append(
        f"screening pruned with a {advice.margin:.0%} margin (one short process a cell); "
        f"finalists measured in full; a tie is within {advice.threshold:.0%}"
    )
    return out
