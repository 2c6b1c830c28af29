"""How every view marks timings it shows but must not trust, and renders foreign text.

One rule, the same in the terminal tables, the HTML report and the exports:

- A ratio ("vs eager", time or memory ratio) is a plain number only when its baseline cell
  is `ok`. Over an `unstable` baseline it is shown marked, "1.80×?", and left out of every
  summary (geometric means): an unstable timing is verified and was taken on a quiet
  machine, only its spread is wider than asked, so the number is indicative (the suite
  summary averages such ratios apart, in a second mean marked the same way). Over a
  baseline with no valid timing (disturbed, failed, not run) there is no ratio, "—": a
  disturbed timing can be skewed by orders of magnitude, so nothing is derived from it.
- A `disturbed` cell's median is shown marked "†" (the store keeps it, and the user may
  have kept it on purpose with --on-disturbed keep), taken from its undisturbed
  repetitions when it has any, else from its disturbed ones; it enters no ratio, pool,
  plot or baseline.
- An `unstable` cell's timing is valid (pooled, plotted); its status is marked. A cell is
  unstable when a repetition did not settle, or when its repetitions' medians disagree
  beyond the run's target (CellResult.spread_reason).
- A cell's interval is over its repetitions (each one process), never over pooled
  iterations; a single repetition's interval is shown as what it is, within-process
  (shown_timing).

Text that stackcost did not write (reasons, model names, paths) is never read as rich
markup: views pass it as `rich.text.Text`, so "[enforce fail at ...]" stays visible.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from stackcost.measure.stats import WINDOWS, Spreads, Stats, repetition_interval, summarize
from stackcost.report.units import ms, num
from stackcost.result import TRUSTED_STATUSES, VALID_STATUSES, headline
from stackcost.store.runs import CellResult

DISTURBED_MARK = "†"
UNTRUSTED_BASE_MARK = "?"

# Terminal colours per status; anything not listed (failures) is red.
STATUS_STYLE = {
    "ok": "green",
    "unstable": "yellow",
    "disturbed": "magenta",
    "unavailable": "dim",
    "unsupported": "dim",
    "skipped": "dim",
}

DISTURBED_NOTE = (
    f"{DISTURBED_MARK} disturbed: other processes used the cores during its timed loop; "
    "its median (from undisturbed repetitions if any) is shown but enters no ratio"
)


CI_NOTE = (
    "95% CI over repeats: a t-interval of the mean of the repetitions' medians, each "
    "repetition its own process; — with one repetition, whose only CI is within-process"
)


def ci_over_repeats(row: Any) -> str:
    """A cell-frame row's CI over its repetitions (frames/tidy.py: ci_low/high_ms), as
    'low–high'; '—' with fewer than two valid repetitions or no valid timing."""
    low, high = row.ci_low_ms, row.ci_high_ms
    if not row.valid or low is None or high is None or math.isnan(low) or math.isnan(high):
        return "—"
    return f"{num(row.ci_low_ms)}–{num(row.ci_high_ms)}"


SPREAD = "spread in/between"
# Where a cell's time varies (measure.stats.Spreads): the column of the run table and the
# markdown export, shown where a cell has 2+ repetitions; the note says what it means.
SPREAD_NOTE = (
    f"spread in/between = relative SD of a process's timed loop cut into {WINDOWS} windows "
    "(the mean over its processes) / relative SD of the processes' medians; a between "
    f"spread above twice in/sqrt({WINDOWS}) (marked !) is each process's own bias, where its "
    "memory landed: more --repeats average it, a longer --min-time does not; where the "
    "repetitions' page faults a step differ too, --allocator steady removes it"
)


def spread_cell(row: Any) -> str:
    """A cell-frame row's spreads (frames/tidy.py: spread_within/between), as the run
    table shows them; '—' with fewer than two valid repetitions."""
    within, between = row.spread_within, row.spread_between
    if not row.valid or between is None or math.isnan(between):
        return "—"
    known = None if within is None or math.isnan(within) else float(within)
    return Spreads(within=known, between=float(between), processes=int(row.n_valid)).shown()


def ratio_note(baseline: str) -> str:
    return (
        f"{UNTRUSTED_BASE_MARK} {baseline} was unstable on that workload: the ratio is "
        "indicative only; — where one side has no valid timing (its status says why)"
    )


def shown_stats(c: CellResult) -> Stats | None:
    """The timing a view shows for a cell: its valid repetitions pooled; for a disturbed
    cell without any, its disturbed repetitions pooled (never mixed with ok ones)."""
    if c.status in VALID_STATUSES:
        return c.stats
    if c.status != "disturbed":
        return None
    if c.stats is not None:
        return c.stats
    samples = [ns for r in c.repetitions if r.status == "disturbed" for ns in r.samples_ns]
    if samples:
        return summarize(samples)
    return next((r.stats for r in c.repetitions if r.status == "disturbed" and r.stats), None)


@dataclass(frozen=True)
class ShownTiming:
    """The latency a table shows for a cell, with the interval it may claim.

    With two or more repetitions: the mean of their medians and the half-width of the
    t-interval over them (the cell's CI: CellResult.interval). With one: that repetition's
    median and its own CI, which is within-process (`within`) and says nothing of how
    another process would measure."""

    centre_ms: float
    n: int  # repetitions the timing comes from
    half_width_rel: float  # relative half-width of the interval; inf where there is none
    within: bool  # the interval is one repetition's own, over its iterations

    def text(self) -> str:
        """'556.5 µs ± 12.0%' over repetitions; '514.2 µs ± 0.1% within' for one."""
        half = self.half_width_rel
        spread = f"{half:.1%}" if math.isfinite(half) else "∞"
        return f"{ms(self.centre_ms)} ± {spread}" + (" within" if self.within else "")


def shown_timing(c: CellResult) -> ShownTiming | None:
    """What a table shows for a cell's latency, from the repetitions shown_stats would
    take (the valid ones; a disturbed cell's undisturbed ones if any, else its disturbed
    ones): never an interval over pooled iterations."""
    if c.status in VALID_STATUSES:
        reps = [r for r in c.repetitions if r.valid and r.stats]
    elif c.status == "disturbed":
        reps = [r for r in c.repetitions if r.valid and r.stats] or [
            r for r in c.repetitions if r.status == "disturbed" and r.stats
        ]
    else:
        return None
    if not reps:
        return None
    if len(reps) == 1:
        s = reps[0].stats
        assert s is not None
        return ShownTiming(s.median_ms, 1, s.ci_half_width_rel, within=True)
    interval = repetition_interval([r.stats.median_ms for r in reps if r.stats], c.confidence)
    assert interval is not None
    return ShownTiming(interval.mean_ms, len(reps), interval.half_width_rel, within=False)


def shown_median_of(c: CellResult, attr: str) -> float | None:
    """CellResult.median_of (cold start, startup) under shown_stats' rule: a disturbed
    cell's from its undisturbed repetitions if any, else from its disturbed ones."""
    if c.status != "disturbed":
        return c.median_of(attr)
    reps = [r for r in c.repetitions if r.valid] or [
        r for r in c.repetitions if r.status == "disturbed"
    ]
    values = [v for r in reps if (v := getattr(r, attr)) is not None]
    return float(statistics.median(values)) if values else None


def cell_reason(c: CellResult) -> str:
    """The headline of the reason of a repetition that gave the cell its status."""
    reasons = [r.reason for r in c.repetitions if r.status == c.status and r.reason]
    return headline(reasons[0] if reasons else c.reason)


def ratio_text(value: float | None, base_status: str | None, digits: int = 2) -> str:
    """'0.60×', '0.60×?' over an untrusted baseline, '—' where there is no ratio."""
    if value is None or not math.isfinite(value) or not base_status:
        return "—"
    mark = "" if base_status in TRUSTED_STATUSES else UNTRUSTED_BASE_MARK
    return f"{value:.{digits}f}×{mark}"


def ratio_cell(value: float | None, base_status: str, digits: int = 3) -> str:
    """A ratio in a table whose header carries the ×: '0.6', '0.6?' or '—'."""
    text = num(value, digits)
    if text == "—" or not base_status or base_status in TRUSTED_STATUSES:
        return text
    return text + UNTRUSTED_BASE_MARK


def timing_cell(row: Any, col: str) -> str:
    """A timing of a cell-frame row (frames/tidy.py): a valid cell's plain, a disturbed
    cell's marked_* value with †, '—' for the rest."""
    if row.status == "disturbed":
        value = getattr(row, f"marked_{col}")
        return "—" if value is None or math.isnan(value) else f"{num(value)}{DISTURBED_MARK}"
    return num(getattr(row, col))


def status_text(status: str, reason: str = "") -> Text:
    """A status in its colour, with its reason's headline whole below it (rich wraps it)."""
    text = Text()
    text.append(status, style=STATUS_STYLE.get(status, "red"))
    if reason and status != "ok":
        text.append("\n")
        text.append(headline(reason), style="dim")
    return text
