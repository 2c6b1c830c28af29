"""Every view shows a cell's interval over its repetitions (each its own process), says how
many there were, shows a single repetition's CI only as within-process, and calls an ok
cell whose repetitions disagree beyond the run's target `unstable`."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from rich.console import Console
from scipy import stats as sps

from stackcost.measure.protocol import Protocol
from stackcost.measure.stats import summarize
from stackcost.report.exports.formats import export
from stackcost.report.frames import tidy
from stackcost.report.html.page import render_html
from stackcost.report.terminal.run import results_table
from stackcost.result import RepetitionResult
from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from tests.conftest import tiny_cell

SPREAD = [0.522, 0.686, 0.531]  # batch 1, three processes that disagree
AGREE = [0.400, 0.402, 0.404]  # batch 2, three that agree within 1%
SINGLE = 0.3  # batch 4, one repetition


def _rep(median_ms: float, i: int) -> RepetitionResult:
    rng = np.random.default_rng(i)
    samples = [int(median_ms * 1e6 * (1 + 0.01 * x)) for x in rng.standard_normal(400)]
    return RepetitionResult(
        status="ok",
        repetition=i,
        stats=summarize(samples),
        samples_ns=samples,
        throughput=1 / median_ms,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> RunResult:
    path = tmp_path_factory.mktemp("reps") / "s.db"
    spec = {"repeats": 3, "protocol": Protocol().model_dump()}  # target ±2%
    with Store(path) as store:
        run_id = store.create_run(spec, {})
        for batch, medians in ((1, SPREAD), (2, AGREE), (4, [SINGLE])):
            cell_id = store.add_cell(run_id, tiny_cell(batch_size=batch))
            for i, m in enumerate(medians):
                store.add_repetition(cell_id, _rep(m, i))
        store.finish_run(run_id)
    with Store(path) as store:
        return RunResult.from_store(store, run_id)


def _row(text: str, batch: int) -> str:
    pattern = re.compile(rf"│\s*{batch}\s*│[^│]*│\s*eager\s*│")
    return next(line for line in text.splitlines() if pattern.search(line))


def _medians(run: RunResult, batch: int) -> list[float]:
    """The repetitions' own medians (their samples scatter ~0.05% about the nominal ones)."""
    (c,) = [c for c in run.cells() if c.cell.batch_size == batch]
    return [r.stats.median_ms for r in c.repetitions]


def _t_interval(medians: list[float]) -> tuple[float, float]:
    return sps.t.interval(0.95, len(medians) - 1, np.mean(medians), sps.sem(medians))


def _t_half_rel(medians: list[float]) -> float:
    low, high = _t_interval(medians)
    return (high - low) / 2 / np.mean(medians)


def test_terminal_table_shows_repetitions_and_their_interval(run):
    console = Console(record=True, width=250)
    console.print(results_table(run))
    text = console.export_text()
    assert re.search(r"┃\s*reps\s*┃\s*latency ± CI\s*┃", text)
    spread = _row(text, 1)
    mean, half = np.mean(_medians(run, 1)) * 1e3, _t_half_rel(_medians(run, 1))
    assert re.search(rf"│\s*3\s*│\s*{mean:.1f} µs ± {half:.1%}\s*│", spread)
    assert 575 < mean < 585  # the mean of the three medians, not the pooled median (~531)
    assert "unstable" in spread and "repetition medians disagree: 3 span" in text
    agree = _row(text, 2)
    mean, half = np.mean(_medians(run, 2)) * 1e3, _t_half_rel(_medians(run, 2))
    assert re.search(rf"│\s*3\s*│\s*{mean:.1f} µs ± {half:.1%}\s*│", agree)
    assert "ok" in agree and "within" not in agree
    # One repetition: its own CI, labelled within-process; never an interval across processes.
    single = _row(text, 4)
    (own,) = [c.repetitions[0].stats for c in run.cells() if c.cell.batch_size == 4]
    shown = rf"{own.median_ms * 1e3:.1f} µs ± {own.ci_half_width_rel:.1%} within"
    assert re.search(rf"│\s*1\s*│\s*{shown}\s*│", single)
    assert "t-interval over them" in text and "marked within" in text


def test_cell_frame_carries_the_interval_and_the_verdict(run):
    cells = tidy.cells([run]).set_index("batch_size")
    assert list(cells["n_valid"]) == [3, 3, 1]
    assert cells.loc[1, "status"] == "unstable" and not cells.loc[1, "trusted"]
    assert cells.loc[1, "reason"].startswith("repetition medians disagree: 3 span")
    assert cells.loc[2, "status"] == "ok" and cells.loc[4, "status"] == "ok"
    low, high = _t_interval(_medians(run, 2))
    assert (cells.loc[2, "ci_low_ms"], cells.loc[2, "ci_high_ms"]) == (
        pytest.approx(low),
        pytest.approx(high),
    )
    assert cells.loc[2, "ci_method"] == "t-interval over 3 repetition medians"
    assert math.isnan(cells.loc[4, "ci_low_ms"]) and cells.loc[4, "ci_method"] == ""
    # The same verdict as the typed view's.
    assert [c.status for c in run.cells()] == list(cells["status"])


def test_markdown_says_how_many_repetitions_and_their_interval(run):
    md = export([run], "md")
    header, _, *rows = [line for line in md.splitlines() if line.startswith("|")]
    cols = [c.strip() for c in header.strip("|").split("|")]
    by_batch = {}
    for line in rows:
        values = [v.strip() for v in line.strip("|").split("|")]
        by_batch[int(values[cols.index("batch (samples)")])] = dict(zip(cols, values, strict=True))
    assert [by_batch[b]["repeats"] for b in (1, 2, 4)] == ["3", "3", "1"]
    assert by_batch[4]["95% CI over repeats (ms)"] == "—"
    assert by_batch[2]["95% CI over repeats (ms)"].count("–") == 1
    assert "t-interval of the mean of the repetitions' medians" in md


def test_json_names_the_method_and_csv_labels_the_within_process_ci(run):
    cells = json.loads(export([run], "json"))["cells"]
    assert [c["ci_method"] for c in cells] == [
        "t-interval over 3 repetition medians",
        "t-interval over 3 repetition medians",
        "",
    ]
    assert cells[2]["ci_low_ms"] is None
    header = export([run], "csv").splitlines()[0].split(",")
    assert "within_ci_low_ms" in header and "ci_low_ms" not in header


def test_html_shows_the_interval_over_repeats(run):
    html = render_html([run])
    assert "95% CI over repeats (ms)" in html and "t-interval of the mean" in html


def test_the_table_says_where_the_time_varies_within_and_between_processes(run):
    console = Console(record=True, width=300)
    console.print(results_table(run))
    text = console.export_text()
    assert "spread in/between" in text and "where its memory landed" in text
    # SPREAD's processes differ by 15%, their windows by ~0.1%: the processes' own bias
    assert _row(text, 1).rstrip(" │").endswith("!")
    spread = [c for c in run.cells() if c.cell.batch_size == 1][0].spreads
    assert spread.between > 0.1 and spread.within < 0.01
    # AGREE's processes differ by 0.5%, about what their own noise explains
    agree = [c for c in run.cells() if c.cell.batch_size == 2][0].spreads
    assert agree.between < 0.01
    assert [c for c in run.cells() if c.cell.batch_size == 4][0].spreads is None
