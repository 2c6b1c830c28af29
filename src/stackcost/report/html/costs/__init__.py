"""The "where the time goes" section of the HTML report, for runs made with `--profile`.

Per profiled cell: the per-iteration breakdown (kernels, overhead, ... and the remainder
the profiler's timeline did not see), the top operators, the cell on a roofline under the
machine's measured peaks, its share of that peak, how many cores it kept busy, and its
power against its throughput. Plus thread scaling, from any run whose workloads were
measured at several thread counts (no profile needed).

Only valid cells ("ok" or "unstable") are drawn: a "wrong" cell's time is not a time.
Every builder returns a Panel whose figure is None, with a note saying why, when there is
nothing honest to draw. Strings from the store reach plotly entity-escaped (plotly reads
labels as HTML); the tables get raw strings, which Jinja escapes.

One module per panel: breakdown, roofline, utilization, energy, best (tables) and
scaling, each returning a Panel (panel.py); the cells they draw are frames/costs.py's. This
module assembles them into the page's Section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from stackcost.report.frames.costs import collect
from stackcost.report.html.costs.best import best_tables
from stackcost.report.html.costs.breakdown import breakdown_figure, op_tables
from stackcost.report.html.costs.energy import energy_figure
from stackcost.report.html.costs.panel import Panel
from stackcost.report.html.costs.roofline import PEAK_HEADER, peak_table, roofline_figure
from stackcost.report.html.costs.scaling import scaling_figure
from stackcost.report.html.costs.utilization import utilization_figure
from stackcost.store.runs import RunResult

NO_PROFILE = (
    "No cell of these runs carries profile data: run with `stackcost run ... --profile` for "
    "the breakdown, top operators, roofline, utilization and energy."
)


@dataclass
class Section:
    profiled: int  # cells with profile data
    panels: dict[str, Panel]
    op_tables: list[dict[str, Any]]
    peak_header: list[str]
    peak_rows: list[list[str]]
    best_tables: list[dict[str, Any]]
    note: str = ""


def section(runs: list[RunResult], summ: pd.DataFrame, colors: dict[str, str]) -> Section:
    """Everything the page's "where the time goes" section shows."""
    rows = collect(runs, summ)
    panels: dict[str, Panel] = {}
    if rows:
        panels["breakdown"] = breakdown_figure(rows, colors)
        panels["roofline"] = roofline_figure(rows, colors)
        panels["utilization"] = utilization_figure(rows, colors)
        panels["energy"] = energy_figure(rows, colors)
    panels["scaling"] = scaling_figure(summ, colors)
    return Section(
        profiled=len(rows),
        panels=panels,
        op_tables=op_tables(rows),
        peak_header=PEAK_HEADER,
        peak_rows=peak_table(rows),
        best_tables=best_tables(rows),
        note="" if rows else NO_PROFILE,
    )
