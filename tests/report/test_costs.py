"""The "where the time goes" section: its data, its figures and the page in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from stackcost.report.frames import tidy
from stackcost.report.frames.costs import Row, collect, roof, scaling_frame
from stackcost.report.html import costs
from stackcost.report.html.costs.best import best_tables
from stackcost.report.html.costs.breakdown import breakdown_figure, op_tables
from stackcost.report.html.costs.energy import energy_figure
from stackcost.report.html.costs.roofline import peak_table, roofline_figure
from stackcost.report.html.costs.scaling import scaling_figure
from stackcost.report.html.costs.utilization import utilization_figure
from stackcost.report.html.page import render_html
from stackcost.report.style import series_colors
from tests.report.costs_fixtures import (
    BUSY_CELL,
    EVIL_MODEL,
    EVIL_OP,
    FLOPS_PER_SAMPLE,
    MEDIAN_MS,
    PEAKS,
    power,
    profiled_runs,
)


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    return profiled_runs(tmp_path_factory.mktemp("prof") / "p.db")


@pytest.fixture(scope="module")
def summ(prof):
    return tidy.summary(prof)


@pytest.fixture(scope="module")
def colors(summ):
    return series_colors(tidy.series_order(summ))


@pytest.fixture(scope="module")
def rows(prof, summ):
    return collect(prof, summ)


def _row(rows, backend, batch, threads, model="mlp"):
    (r,) = [
        r
        for r in rows
        if (r.cell.backend, r.cell.batch_size, r.cell.threads, r.cell.model.name)
        == (backend, batch, threads, model)
    ]
    return r


def test_collect_keeps_valid_profiled_cells_only(rows):
    # 8 eager/onnxruntime cells + libtorch + the hostile model; the "wrong" cell is out.
    assert len(rows) == 10
    assert {r.cell.backend for r in rows} == {"eager", "onnxruntime", "libtorch"}
    r = _row(rows, "eager", 4, 2)
    assert r.median_ms == pytest.approx(16.0)
    assert r.peaks is not None and r.peaks.fp32_gflops == PEAKS[2][0]
    assert r.workload == "mlp · b4 · 32 px · 2 thr"


def test_breakdown_figure(rows, colors):
    panel = breakdown_figure(rows, colors)
    fig = panel.fig
    assert fig is not None
    names = [t.name for t in fig.data]
    # kernels, overhead, remainder, unprofiled-wall marker, timed-loop median marker
    assert names[:3] == ["kernels", "overhead", "remainder (not seen by the profiler)"]
    assert len(fig.data) == 5
    kernels = fig.data[0]
    assert len(kernels.y) == 9  # every profiled cell with a breakdown (not libtorch)
    # Stacked per workload, one bar per backend: a two-level category axis.
    assert len(kernels.x) == 2 and "eager" in kernels.x[1]
    assert fig.layout.barmode == "relative"
    assert fig.data[2].marker.pattern.shape == "/"
    # Remainder = wall - parts: 2% of the wall in the fixture.
    r = _row(rows, "eager", 1, 1)
    i = [*zip(*kernels.x, strict=True)].index(("mlp · b1 · 32 px · 1 thr", "eager"))
    assert fig.data[2].y[i] == pytest.approx(r.rep.breakdown.wall_ms * 0.02)
    assert "top ops: aten::mkldnn_convolution 60%, aten::addmm 12%, Relu 5%" in str(
        kernels.customdata[i][0]
    )
    # The hostile operator reaches the hover escaped.
    assert any("&lt;img src=x" in str(c[0]) for c in kernels.customdata)
    assert any("C++ program has no timers" in n and "libtorch" in n for n in panel.notes)
    # The % button holds one y array per trace.
    buttons = fig.layout.updatemenus[0].buttons
    pct = buttons[1].args[0]["y"]
    assert len(pct) == len(fig.data)
    assert pct[0][i] == pytest.approx(100 * 0.8)


def test_op_tables(rows):
    tables = op_tables(rows)
    assert len(tables) == 9
    t = next(t for t in tables if t["title"] == "eager · mlp · b1 · 32 px · 1 thr")
    assert t["rows"][0] == ["aten::mkldnn_convolution", "1", "7.92", "60.0"]
    assert t["notes"] == ["eager note"]
    assert not any("WRONG_CELL_OP" in str(t) for t in tables)


def test_roofline(rows, colors):
    panel = roofline_figure(rows, colors)
    fig = panel.fig
    assert fig is not None
    assert "ESTIMATED" in fig.layout.title.text and "ESTIMATED" in fig.layout.xaxis.title.text
    roofs = [t for t in fig.data if t.name.startswith("roof")]
    assert [t.name for t in roofs] == [
        "roof, 1 thread: 150 GFLOP/s, 14.6 GB/s",
        "roof, 2 threads: 318 GFLOP/s, 15.9 GB/s",
    ]
    for trace, (peak, bw) in zip(roofs, (PEAKS[1], PEAKS[2]), strict=True):
        for x, y in zip(trace.x, trace.y, strict=True):
            assert y == pytest.approx(min(peak, x * bw))
        assert any(x == pytest.approx(peak / bw) for x in trace.x)  # the ridge is a vertex
    assert roof(1.0, 318.0, 15.9) == pytest.approx(15.9)
    assert roof(1000.0, 318.0, 15.9) == pytest.approx(318.0)
    # One point per cell, at intensity flops/bytes = 6 FLOP/byte.
    points = [t for t in fig.data if not t.name.startswith("roof")]
    assert sum(len(t.x) for t in points) == 10
    assert all(x == pytest.approx(6.0) for t in points for x in t.x)
    # threads vary: one trace per (backend, threads), told apart by the marker shape
    assert {t.name for t in points} >= {"eager · 1 thr", "eager · 2 thr"}
    # 120 GFLOP/s at 6 FLOP/byte is above the 2-thread roof (6 × 15.9 = 95.4)
    above = [n for n in panel.notes if "above its roof" in n]
    assert len(above) == 2 and all("2 thr" in n and "95.4 GFLOP/s" in n for n in above)


def test_peak_table(rows):
    table = peak_table(rows)
    assert len(table) == 10
    row = next(r for r in table if r[0] == "onnxruntime" and r[1] == "mlp · b1 · 32 px · 2 thr")
    achieved = FLOPS_PER_SAMPLE / (MEDIAN_MS[("onnxruntime", 1, 2)] / 1e3) / 1e9  # 120
    assert row[5] == f"{achieved:,.4g}"
    assert row[6] == "318"
    assert row[7] == f"{100 * achieved / PEAKS[2][0]:.1f}"  # 37.7


def test_utilization_flags_busy_cells(rows, colors):
    panel = utilization_figure(rows, colors)
    assert panel.fig is not None
    backend, batch, threads = BUSY_CELL
    assert len(panel.notes) == 1
    assert panel.notes[0].startswith(
        f"BUSY MACHINE: {backend} · mlp · b{batch} · 32 px · {threads} thr"
    )
    ort = next(t for t in panel.fig.data if t.name == "onnxruntime")
    flagged = [s for s in ort.marker.pattern.shape if s]
    assert flagged == ["x"] and "busy machine" in ort.text
    assert "busy-machine" in panel.fig.layout.title.text
    # How the sampler kept up is in the hover: its samples come late on full cores.
    sampling = {row[4] for trace in panel.fig.data[:-2] for row in trace.customdata}
    assert "50 samples every 10 ms asked, longest gap 250 ms (sampler: idle)" in sampling


def test_energy_fit_and_methods(rows, colors):
    panel = energy_figure(rows, colors)
    fig = panel.fig
    assert fig is not None
    names = [t.name for t in fig.data]
    # Measured and estimated never share a series: the method is in every name.
    assert "eager · cpu · estimated" in names
    assert "onnxruntime · cpu · measured" in names
    assert "onnxruntime · cpu · estimated" in names
    fits = {n.split(" fit: ")[0]: n for n in names if " fit: " in n}
    assert set(fits) == {"eager · cpu · estimated", "onnxruntime · cpu · measured"}
    assert fits["eager · cpu · estimated"].endswith("R² = 1.000")  # an exact line
    # R² of the measured ORT points, computed independently.
    pts = [
        (b / (MEDIAN_MS[("onnxruntime", b, t)] / 1e3), power("onnxruntime", b, t))
        for b, t in ((1, 1), (4, 1), (4, 2))
    ]
    x, y = np.array(pts).T
    r2 = np.corrcoef(x, y)[0, 1] ** 2
    assert fits["onnxruntime · cpu · measured"].endswith(f"R² = {r2:.3f}")
    assert any("onnxruntime · cpu · estimated: 1 point(s)" in n for n in panel.notes)
    assert "measured and ESTIMATED" in fig.layout.title.text
    # The estimate's source is shown once, without every cell's busy-core count.
    (est,) = [n for n in panel.notes if n.startswith("estimated")]
    assert "P_max = 5 W per busy core assumed" in est and "busy cores of" not in est


def test_best_tables(rows):
    throughput, energy = best_tables(rows)
    assert throughput["columns"] == [1, 4]
    row = next(r for r in throughput["rows"] if r["label"] == "mlp · 32 px · 1 thr · fp32 · cpu")
    assert [c["text"] for c in row["cells"]] == ["onnxruntime", "onnxruntime"]
    assert row["cells"][0]["value"].startswith("250 ")  # 1 sample / 4 ms
    labels = [r["label"] for r in energy["rows"]]
    assert any(lab.endswith("measured") for lab in labels)
    assert any(lab.endswith("estimated") for lab in labels)


def test_thread_scaling(summ, colors):
    df = scaling_frame(summ)
    got = {
        (r.series, r.batch_size, r.threads): r.speedup
        for r in df.itertuples(index=False)
        if r.model == "mlp"
    }
    for (backend, batch, threads), ms in MEDIAN_MS.items():
        expected = MEDIAN_MS[(backend, batch, 1)] / ms
        assert got[(backend, batch, threads)] == pytest.approx(expected)
    assert got[("eager", 1, 2)] == pytest.approx(1.6)
    panel = scaling_figure(summ, colors)
    fig = panel.fig
    ideal = [t for t in fig.data if t.name.startswith("ideal")]
    assert list(ideal[0].x) == [1, 2] and list(ideal[0].y) == [1.0, 2.0]
    # one selector entry per workload (batch 1 and 4)
    assert len(fig.layout.updatemenus[0].buttons) == 2


def test_nothing_to_draw(runs, summ, colors):
    """The conftest runs have no profile data and one thread count."""
    cell_df = tidy.summary(runs)
    sec = costs.section(runs, cell_df, series_colors(tidy.series_order(cell_df)))
    assert sec.profiled == 0 and "--profile" in sec.note
    assert set(sec.panels) == {"scaling"}
    assert sec.panels["scaling"].fig is None
    assert "two or more thread counts" in sec.panels["scaling"].note
    assert breakdown_figure([], colors).fig is None
    assert roofline_figure([], colors).fig is None
    assert utilization_figure([], colors).fig is None
    assert energy_figure([], colors).fig is None
    assert best_tables([]) == []


def test_missing_fields_are_notes(rows, colors):
    bare = [
        Row(
            r.run_id,
            r.cell,
            r.series,
            r.workload,
            r.rep.model_copy(
                update={"work": None, "achieved_gflops": None, "telemetry": None, "energy": None}
            ),
            None,
        )
        for r in rows
    ]
    roof = roofline_figure(bare, colors)
    assert roof.fig is None and "FLOP count" in roof.note
    assert peak_table(bare) == []
    assert utilization_figure(bare, colors).fig is None
    energy = energy_figure(bare, colors)
    assert energy.fig is None and "energy" in energy.note
    # no peaks for the run: points without roofs, and a note saying so
    no_peaks = [Row(r.run_id, r.cell, r.series, r.workload, r.rep, None) for r in rows]
    panel = roofline_figure(no_peaks, colors)
    assert panel.fig is not None
    assert not any(t.name.startswith("roof") for t in panel.fig.data)
    assert any("no measured fp32 peak at 2 threads" in n for n in panel.notes)


# -- the page in Chromium --------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} not installed")
def test_page_in_chromium(prof, tmp_path):
    from tests.report.test_html import ARGS, _figures, _open

    sync_api = pytest.importorskip("playwright.sync_api")
    path = tmp_path / "report.html"
    html = render_html(prof)
    path.write_text(html, encoding="utf-8")
    figs = _figures(html)
    titles = [f["layout"]["title"]["text"] for f in figs]
    for want in ("where the time goes", "roofline", "CPU use", "power against", "thread scaling"):
        assert any(want in t for t in titles), want
    # Nothing of the "wrong" cell: its operator, its 777 ms.
    assert "WRONG_CELL_OP" not in html
    assert not any(
        abs(y - 777.0) < 1
        for f in figs
        for t in f["data"]
        for y in t.get("y") or []
        if isinstance(y, (int, float))
    )
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            o = _open(browser, path)
            assert o.problems == [] and o.blocked == [] and o.dialogs == []
            count = int(o.page.get_attribute("body", "data-figure-count"))
            assert o.page.get_attribute("body", "data-rendered") == str(count)
            assert count == len(figs)
            assert o.page.locator("nav a[href='#costs']").inner_text() == "where the time goes"
            section = o.page.locator("#costs")
            assert section.inner_text() == "Where the time goes"
            text = o.page.inner_text("body")
            assert "BUSY MACHINE: onnxruntime" in text
            assert "C++ program has no timers" in text
            assert "R² = 1.000" in " ".join(o.page.locator(".legendtext").all_text_contents())
            # Hostile names are text, in the tables and in the SVG.
            assert EVIL_MODEL in text
            o.page.locator("details.ops > summary", has_text=EVIL_MODEL).click()
            assert EVIL_OP in o.page.locator("details.ops[open]").inner_text()
            assert o.page.locator("img").count() == 0
            svg = " ".join(o.page.locator(".main-svg text").all_text_contents())
            assert EVIL_MODEL in svg
            # The breakdown's % button restyles without errors.
            bars = o.page.locator(".sc-plot").filter(has=o.page.locator(".updatemenu-button"))
            button = bars.first.locator(".updatemenu-button").nth(1)
            button.scroll_into_view_if_needed()
            box = button.bounding_box()
            o.page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            o.page.wait_for_function(
                "[...document.querySelectorAll('.ytitle')].some("
                "e => e.textContent.startsWith('share of the profiled wall'))"
            )
            assert o.problems == []
        finally:
            browser.close()
    assert re.search(r'<h2 id="costs">', html)


def test_matplotlib_figures(prof, tmp_path):
    from stackcost.report.figures.write import write_figures

    paths = write_figures(prof, tmp_path)
    stems = {p.stem for p in paths}
    assert {"breakdown", "roofline", "power_vs_throughput", "thread_scaling"} <= stems
    for p in paths:
        assert p.stat().st_size > 5_000


def test_energy_scatter_per_machine(rows, colors):
    import dataclasses

    two = [
        dataclasses.replace(r, machine="box-b" if r.series == "onnxruntime" else "box-a")
        for r in rows
    ]
    fig = energy_figure(two, colors).fig
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["box-a", "box-b"]  # one scatter per machine, side by side
    names = [t.name for t in fig.data]
    assert "onnxruntime · cpu · measured · box-b" in names
    assert {t.xaxis for t in fig.data if t.name.startswith("onnxruntime")} == {"x2"}
