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
- An `unstable` cell's timing is valid (pooled, plotted); its status is marked.

Text that stackcost did not write (reasons, model names, paths) is never read as rich
markup: views pass it as `rich.text.Text`, so "[enforce fail at ...]" stays visible.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from rich.text import Text

from stackcost.measure.stats import Stats, summarize
from stackcost.report.units import num
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
    """A timing of a cell-frame row (report/data.py): a valid cell's plain, a disturbed
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
