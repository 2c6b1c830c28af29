"""Every tick of the HTML report's log axes reads whole, with its unit: '20 ms', '50 ms',
never plotly's abbreviated '2', '5' under a '10'."""

from __future__ import annotations

import json
import re

import pytest

from stackcost.report.html.page import render_html
from stackcost.report.html.plots import log_ticks


def _figures(html: str) -> list[dict]:
    blocks = re.findall(
        r'<script type="application/json" class="sc-figure"[^>]*>(.*?)</script>', html, re.S
    )
    return [json.loads(b) for b in blocks]


def _number(label: str, unit: str) -> float:
    assert label.endswith(unit), f"{label!r} has no unit {unit!r}"
    return float(label.removesuffix(unit).replace(",", ""))


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([20.0, 70.0], ["20 ms", "30 ms", "50 ms", "70 ms"]),  # the axis
        ([0.4, 90.0], ["0.5 ms", "1 ms", "2 ms", "5 ms", "10 ms", "20 ms", "50 ms"]),
        ([12.3, 12.9], ["12.4 ms", "12.6 ms", "12.8 ms"]),  # within a decade's marks
    ],
)
def test_every_tick_in_range_is_labelled_whole_with_its_unit(values, shown):
    ticks = log_ticks(values, " ms")
    assert len(ticks["tickvals"]) == len(ticks["ticktext"])
    inside = [
        text
        for v, text in zip(ticks["tickvals"], ticks["ticktext"], strict=True)
        if min(values) <= v <= max(values)
    ]
    assert inside == shown
    for v, text in zip(ticks["tickvals"], ticks["ticktext"], strict=True):
        assert _number(text, " ms") == pytest.approx(v)


def test_wide_ranges_keep_one_notation():
    texts = log_ticks([1e-9, 0.02], "")["ticktext"]
    assert texts[0] == "1e-9" and "1e-2" in texts and all(re.fullmatch(r"1e-\d", t) for t in texts)


def test_the_reports_log_axes_carry_their_ticks_and_units(runs):
    figures = _figures(render_html(runs))
    axes = [
        (f["layout"].get("title", {}).get("text", ""), name, axis)
        for f in figures
        for name, axis in f["layout"].items()
        if re.fullmatch(r"[xy]axis\d*", name) and axis.get("type") == "log"
    ]
    latency = [a for t, n, a in axes if t.startswith("latency vs") and n == "yaxis"]
    startup = [a for t, n, a in axes if t.startswith("cold start") and n.startswith("yaxis")]
    assert latency and len(startup) == 2  # the fixture's figures that have log y axes
    for title, name, axis in axes:
        # Explicit ticks, one label each: plotly draws no abbreviated label of its own.
        assert len(axis.get("tickvals", [])) == len(axis.get("ticktext", [])) > 1, (title, name)
    for axis in latency + startup:
        values = [_number(t, " ms") for t in axis["ticktext"]]
        assert values == pytest.approx(axis["tickvals"])
    # The fixture's latencies span under three decades: marks between them, as '2 ms'.
    assert {f"{v:e}"[0] for v in latency[0]["tickvals"]} >= {"1", "2", "5"}
