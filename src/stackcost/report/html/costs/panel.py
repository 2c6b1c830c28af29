"""What every panel of the section returns (Panel), and the colour and category axis the
panels share."""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go

from stackcost.report.frames.costs import Row
from stackcost.report.html.plots import escape_label
from stackcost.report.style import PALETTE


@dataclass
class Panel:
    """One figure of the section: the figure, or None and a note saying why not.

    `note` is shown under the figure (or in its place); `notes` are per-cell remarks
    listed under it (what could not be profiled, busy machines, missing fits).
    """

    fig: go.Figure | None
    note: str = ""
    notes: list[str] = field(default_factory=list)


def series_color(colors: dict[str, str], series: str) -> str:
    return colors.get(series) or PALETTE[sum(map(ord, series)) % len(PALETTE)]


def workload_axis(rows: list[Row]) -> list[list[str]]:
    """A two-level category axis: workload outside, series inside (escaped)."""
    return [[escape_label(r.workload) for r in rows], [escape_label(r.series) for r in rows]]
