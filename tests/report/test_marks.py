"""Untrusted timings in every view: a ratio over an unstable baseline is marked '?' and
left out of summaries, a disturbed baseline gives no ratio, a disturbed cell's median is
shown marked '†' and used by nothing."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from rich.console import Console

from stackcost.report.exports.formats import export
from stackcost.report.frames import tidy
from stackcost.report.frames.costs import UNSTABLE_BASE, scaling_frame
from stackcost.report.html.costs.scaling import scaling_figure
from stackcost.report.html.page import render_html
from stackcost.report.marks import ratio_cell, ratio_text, shown_stats
from stackcost.report.terminal.run import results_table, speedups
from stackcost.report.terminal.train import train_table
from tests.report.marks_fixtures import (
    BUSY_MS,
    EAGER_MS,
    TS_MS,
    UNSTABLE_REASON,
    cell,
    marks_run,
    rep,
)

RATIO = EAGER_MS / TS_MS  # eager / torchscript: what "vs eager" shows
DISTURBED_LINE = "disturbed: other processes used 1.02 cores during the timed loop"


def render(table) -> str:
    console = Console(record=True, width=250)
    console.print(table)
    return console.export_text()


def row(text: str, batch: int, backend: str) -> str:
    """The table line of one cell (its first line, where the numbers are)."""
    pattern = re.compile(rf"│\s*{batch}\s*│[^│]*│\s*{backend}\s*│")
    return next(line for line in text.splitlines() if pattern.search(line))


@pytest.fixture(scope="module")
def run():
    return marks_run()


@pytest.fixture(scope="module")
def summ(run):
    return tidy.summary([run])


def _cell(summ: pd.DataFrame, backend: str, batch: int) -> pd.Series:
    (i,) = summ.index[(summ["backend"] == backend) & (summ["batch_size"] == batch)]
    return summ.loc[i]


def test_ratio_text_rule():
    assert ratio_text(0.6, "ok") == "0.60×"
    assert ratio_text(0.6, "unstable") == "0.60×?"
    assert ratio_text(None, "") == ratio_text(0.6, "") == ratio_text(math.nan, "ok") == "—"
    assert ratio_cell(0.6, "ok") == "0.6" and ratio_cell(0.6, "unstable") == "0.6?"
    assert ratio_cell(math.nan, "unstable") == "—"


def test_terminal_speedups_carry_their_baselines_status(run):
    cells = run.cells()
    by = {(c.cell.backend, c.cell.batch_size): i for i, c in enumerate(cells)}
    speed = speedups(cells)
    assert speed[by["torchscript", 1]] == pytest.approx((RATIO, "unstable"))
    assert speed[by["torchscript", 8]] == pytest.approx((RATIO, "ok"))
    assert by["torchscript", 2] not in speed  # a disturbed eager is no baseline
    assert by["torchscript", 4] not in speed  # a disturbed cell has no ratio


def test_terminal_table_marks_untrusted_ratios_and_disturbed_cells(run):
    text = render(results_table(run))
    assert f"{RATIO:.2f}×?" in row(text, 1, "torchscript")
    assert f"{RATIO:.2f}×" in row(text, 8, "torchscript")
    assert "?" not in row(text, 8, "torchscript")
    assert "—" in row(text, 2, "torchscript")
    # The disturbed eager shows what it measured, marked, and why; the disturbed
    # torchscript shows its undisturbed repetition's median, never pooled with the busy one.
    # One repetition each: its own CI, labelled within-process.
    assert f"{BUSY_MS:.2f} ms ± 0.0% within†" in row(text, 2, "eager")
    assert f"{TS_MS:.2f} ms ± 0.0% within†" in row(text, 4, "torchscript")
    assert "disturbed" in row(text, 2, "eager") and "unstable" in row(text, 1, "eager")
    assert DISTURBED_LINE in text and UNSTABLE_REASON in text
    assert "eager was unstable on that workload" in text  # the caption explains '?'
    assert "† disturbed" in text


def test_plain_run_has_no_mark_notes(run):
    clean = marks_run([r for r in run.records if r[0].batch_size == 8])
    text = render(results_table(clean))
    assert "†" not in text and "?" not in text


def test_shown_stats_never_pools_disturbed_with_ok(run):
    by = {(c.cell.backend, c.cell.batch_size): c for c in run.cells()}
    assert shown_stats(by["torchscript", 4]).median_ms == pytest.approx(TS_MS)
    assert shown_stats(by["eager", 2]).median_ms == pytest.approx(BUSY_MS)
    assert by["torchscript", 4].stats.n == 20  # the valid pool holds the ok repetition only


def test_summary_keeps_disturbed_timings_apart(summ):
    busy = _cell(summ, "eager", 2)
    assert busy["status"] == "disturbed" and not busy["valid"] and not busy["trusted"]
    assert busy[list(tidy.CELL_TIMINGS)].isna().all()  # no plot or pool can read it
    assert busy["marked_median_ms"] == pytest.approx(BUSY_MS)
    mixed = _cell(summ, "torchscript", 4)
    assert mixed["marked_median_ms"] == pytest.approx(TS_MS)  # its undisturbed repetition
    assert math.isnan(_cell(summ, "torchscript", 8)["marked_median_ms"])
    assert BUSY_MS not in set(summ["median_ms"])


def test_summary_ratios_carry_the_baseline_status(summ):
    assert _cell(summ, "torchscript", 1)["time_ratio"] == pytest.approx(TS_MS / EAGER_MS)
    assert _cell(summ, "torchscript", 1)["base_status"] == "unstable"
    assert _cell(summ, "torchscript", 8)["base_status"] == "ok"
    for backend, batch in (("torchscript", 2), ("torchscript", 4), ("eager", 2)):
        r = _cell(summ, backend, batch)
        assert math.isnan(r["time_ratio"]) and r["base_status"] == ""


def test_summaries_leave_out_ratios_over_an_untrusted_baseline(summ):
    time = tidy.ratio_summary(summ).set_index("metric").loc["time_ratio"]
    assert time["n"] == 1  # batch 8 only: batch 1's eager is unstable
    assert time["geomean"] == pytest.approx(TS_MS / EAGER_MS)
    assert "1 cell left out of the ratios" in tidy.untrusted_base_note(summ)


def test_the_same_run_prefers_a_trusted_baseline():
    # Two eager variants of one workload cannot both exist in a run, but two runs can:
    # the same run's baseline wins, and its status travels with the ratio.
    unstable = marks_run(
        [(cell("eager", 1), rep(EAGER_MS, "unstable")), (cell("torchscript", 1), rep(TS_MS))]
    )
    other = marks_run([(cell("eager", 1), rep(2 * EAGER_MS))])
    other.run_id = "other"
    summ = tidy.summary([unstable, other])
    ts = summ[summ["backend"] == "torchscript"].iloc[0]
    assert ts["base_status"] == "unstable" and ts["time_ratio"] == pytest.approx(0.6)


def test_failures_and_untrusted_lists(summ):
    assert tidy.failures(summ).empty  # disturbed cells measured: not failures
    listed = tidy.untrusted(summ)
    assert list(listed["status"]) == ["disturbed", "disturbed", "unstable"]


def test_markdown_marks_and_explains(run):
    md = export([run], "md")
    lines = md.splitlines()
    ts1 = next(line for line in lines if "| torchscript |" in line and "| 1 |" in line)
    assert f"| {TS_MS / EAGER_MS:.3g}? |" in ts1
    busy = next(line for line in lines if "| eager |" in line and "| disturbed |" in line)
    assert f"| {BUSY_MS:g}† |" in busy and DISTURBED_LINE in busy
    assert "eager was unstable on that workload" in md and "† disturbed" in md


def test_json_and_csv_carry_the_statuses(run):
    import io
    import json

    cells = json.loads(export([run], "json"))["cells"]
    ts1 = next(c for c in cells if c["backend"] == "torchscript" and c["batch_size"] == 1)
    assert ts1["base_status"] == "unstable" and ts1["trusted"]
    busy = next(c for c in cells if c["status"] == "disturbed" and c["backend"] == "eager")
    assert busy["median_ms"] is None and busy["marked_median_ms"] == pytest.approx(BUSY_MS)
    df = pd.read_csv(io.StringIO(export([run], "csv")))
    busy_reps = df[df["status"] == "disturbed"]
    assert busy_reps["median_ms"].isna().all()
    assert (busy_reps["disturbed_median_ms"] == BUSY_MS).all()
    assert (busy_reps["others_cores"] == 1.02).all()


def test_html_marks_untrusted_cells(run):
    html = render_html([run])
    assert "<span>1 unstable</span><span>2 disturbed</span>" in html
    assert f"<td>{BUSY_MS:g}†</td>" in html
    assert f"<td>{TS_MS / EAGER_MS:.3g}?</td>" in html
    assert 'class="status-disturbed untrusted"' in html
    assert 'class="status-unstable untrusted"' in html
    section = html[html.index('id="untrusted"') : html.index('id="cells"')]
    assert DISTURBED_LINE in section and UNSTABLE_REASON in section
    assert "1 cell left out of the ratios" in html


def test_train_table_marks_a_disturbed_step(run):
    text = render(train_table(run))
    busy = row_backend(text, "eager", "disturbed")
    assert f"{BUSY_MS:.2f} ms†" in busy
    assert DISTURBED_LINE in text


def row_backend(text: str, backend: str, status: str) -> str:
    pattern = re.compile(rf"│\s*{backend}\s*│\s*{status}\s*│")
    return next(line for line in text.splitlines() if pattern.search(line))


def test_thread_scaling_marks_an_unstable_base():
    records = [
        (cell("eager", 1, threads=1), rep(EAGER_MS, "unstable")),
        (cell("eager", 1, threads=2), rep(EAGER_MS / 2)),
    ]
    summ = tidy.summary([marks_run(records)])
    frame = scaling_frame(summ)
    assert not frame["base_trusted"].any()
    panel = scaling_figure(summ, {"eager": "#000"})
    assert UNSTABLE_BASE in panel.note
    assert any(UNSTABLE_BASE in t.name for t in panel.fig.data if t.name)
