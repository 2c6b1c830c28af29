"""Whether a rung and precision keeps the model's quality within the user's bound, judged
held out against eager fp32 (`stackcost heldout`'s rows, api.quality).

A classifier's loss is its accuracy drop in points, a decoder's its perplexity increase in
percent, each with its interval. A precision is within the bound only when the whole
interval is: one whose interval straddles the bound is `undecided` and is not recommended,
as a cell with unstable timings is not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WITHIN, BREAKS, UNDECIDED = "within", "breaks", "undecided"


@dataclass(frozen=True)
class Quality:
    """One rung and precision judged against the bound. `verdict`: within, breaks,
    undecided, or the held-out row's own status when it scored nothing (unsupported,
    unavailable, failed)."""

    backend: str
    precision: str
    verdict: str
    loss: float | None = None  # points of accuracy, or percent of perplexity
    low: float | None = None
    high: float | None = None
    unit: str = "pt"
    reason: str = ""

    @property
    def within(self) -> bool:
        return self.verdict == WITHIN

    def words(self) -> str:
        """The loss and its interval, '+0.3 pt [-0.4, +1]', or why nothing was scored."""
        if self.loss is None:
            return f"{self.verdict}: {self.reason}".rstrip(": ")
        interval = f" [{self.low:+.2g}, {self.high:+.2g}]" if self.low is not None else ""
        return f"{self.loss:+.2g} {self.unit}{interval}"


def judge(row: Any, bound: float, decoder: bool) -> Quality:
    """A held-out row (scenarios.heldout.Heldout, or decoder_heldout.DecoderHeldout for a
    decoder) against `bound`, in the row's own unit."""
    if decoder:
        loss, low, high, unit = (
            row.ppl_increase_pct, row.ppl_increase_low_pct, row.ppl_increase_high_pct, "%",
        )  # fmt: skip
    else:
        loss, low, high, unit = row.drop_pt, row.drop_low_pt, row.drop_high_pt, "pt"
    if loss is None:
        return Quality(row.backend, row.precision, row.status, reason=row.reason, unit=unit)
    low, high = (loss if low is None else low), (loss if high is None else high)
    verdict = WITHIN if high <= bound else BREAKS if low > bound else UNDECIDED
    return Quality(row.backend, row.precision, verdict, loss, low, high, unit)


def lossless(backend: str) -> Quality:
    """fp32 on any rung: its outputs are verified against eager fp32's in every timed
    process, so it loses nothing to judge held out."""
    return Quality(backend, "fp32", WITHIN, 0.0, 0.0, 0.0, reason="verified against eager fp32")
