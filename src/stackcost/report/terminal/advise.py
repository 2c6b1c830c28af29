"""advise's answer in the terminal: the recommendation, then every cell's evidence."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from stackcost.advise.advice import Advice
from stackcost.report.fit import FitTable
from stackcost.report.frames.advise import header, headline, lines, row

# What a narrow terminal hides first (report/fit.py).
DROP = ("quality lost", "peak RSS", "TTFT", "TTFT p99", "tail", "phase")


def advise_view(advice: Advice) -> Group:
    """The headline in bold, its lines, and the evidence table (recommended first)."""
    table = FitTable(
        *header(advice), title=f"advise: {advice.model}", drop=DROP, caption=_caption(advice)
    )
    for entry in advice.entries:
        table.add_row(*row(entry, advice))
    head = Text(headline(advice), style="bold green" if advice.recommended else "bold red")
    return Group(head, *(Text(line) for line in lines(advice)), table)


def _caption(advice: Advice) -> str:
    pct = advice.constraints.get("percentile", "p99")
    if advice.mode == "serve":
        return (
            "rate held: the highest request rate a process's sweep held within the SLO (p99 "
            "TPOT and TTFT, every request completed), the median over the processes; TPOT "
            "and TTFT p99 at that rate; peak RSS of the worker; screening rows are one short "
            "sweep each"
        )
    if advice.mode == "generate":
        return (
            f"TPOT and tail ({pct}) are one decode step's latency (a batch); tokens/s of the "
            "batch while decoding; TTFT the median time to the first token; peak RSS of the "
            "worker; screening rows are one short process each"
        )
    return (
        f"median and tail ({pct}) are one call's latency (a batch); throughput in samples/s "
        "at the median; peak RSS of the worker; screening rows are one short process each"
    )
