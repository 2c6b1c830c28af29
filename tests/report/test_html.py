"""The HTML report in a real browser: offline, no errors, every plot drawn, nothing injected."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stackcost.report.html.page import render_html, write_html
from stackcost.report.html.slots import script_json
from tests.report.conftest import EVIL_MODEL, EVIL_REASON, WRONG_MS

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} not installed")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@dataclass
class Opened:
    page: object
    problems: list[str] = field(default_factory=list)  # console errors and page errors
    dialogs: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # any request leaving file://


def _open(browser, path: Path) -> Opened:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    o = Opened(page)
    page.on("console", lambda m: m.type == "error" and o.problems.append(m.text))
    page.on("pageerror", lambda e: o.problems.append(str(e)))

    def on_dialog(d) -> None:
        o.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)

    def route(r) -> None:
        url = r.request.url
        if url.startswith(("file://", "data:")):
            r.continue_()
        else:
            o.blocked.append(url)
            r.abort()

    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_function("document.body.dataset.rendered !== undefined", timeout=30_000)
    return o


def _figures(html: str) -> list[dict]:
    blocks = re.findall(
        r'<script type="application/json" class="sc-figure"[^>]*>(.*?)</script>', html, re.S
    )
    return [json.loads(b) for b in blocks]


@pytest.fixture(scope="module")
def report(runs, browser, tmp_path_factory) -> tuple[Path, Opened]:
    path = write_html(runs, tmp_path_factory.mktemp("html") / "report.html")
    return path, _open(browser, path)


def test_renders_offline_without_errors(report, tmp_path):
    path, o = report
    assert o.problems == [] and o.blocked == []
    count = int(o.page.get_attribute("body", "data-figure-count"))
    # latency, throughput, memory × (batch, resolution) + ratios + startup + verification
    assert count == 9
    assert o.page.get_attribute("body", "data-rendered") == str(count)
    plots = o.page.locator("div.sc-plot")
    assert plots.count() == count
    for i in range(count):
        assert plots.nth(i).locator(".main-svg").count() > 0
    html = path.read_text()
    assert html.count("plotly.js v") == 1  # the library inlined exactly once
    assert not re.search(r"""<(script|link)[^>]+(src|href)=["']?https?:""", html)
    shot = tmp_path / "report.png"
    o.page.screenshot(path=shot, full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_hostile_strings_are_text(report):
    path, o = report
    text = o.page.inner_text("body")
    assert EVIL_MODEL in text and EVIL_REASON in text
    assert o.dialogs == []
    assert o.page.locator("img").count() == 0  # the reason's <img> was not parsed
    # Plotly draws text as pseudo-HTML; the model name must reach the SVG literally.
    svg_text = o.page.locator(".main-svg text").all_text_contents()
    assert EVIL_MODEL in svg_text
    figures = len(_figures(path.read_text()))
    assert o.page.locator("script").count() == figures + 2  # plotly.js + bootstrap


def test_script_json_cannot_close_its_element():
    escaped = script_json(json.dumps({"name": "</script><script>alert(3)</script>&"}))
    assert "<" not in escaped and ">" not in escaped and "&" not in escaped
    assert json.loads(escaped)["name"] == "</script><script>alert(3)</script>&"


def test_wrong_cells_never_show_a_timing(report):
    path, o = report
    o.page.click("#cells + details > summary")
    row = o.page.locator("tr.status-wrong", has_text="onnxruntime").last
    cells = row.locator("td").all_inner_texts()
    header = o.page.locator("#cells + details tr").first.locator("th").all_inner_texts()
    for col in (
        "median latency (ms)",
        "throughput (samples/s)",
        "cold start (ms)",
        "startup (ms)",
        "time vs eager (×)",
    ):
        assert cells[header.index(col)] == "—", col
    assert cells[header.index("max rel err")] == "5.0e-01"
    # The wrong cell's measured time (~123 ms per batch, cold start ~6 s) appears nowhere.
    text = o.page.inner_text("body")
    assert "123.5" not in text and "6,173" not in text
    for fig in _figures(path.read_text()):
        title = fig["layout"]["title"]["text"]
        if "relative error" in title:
            continue
        names = {t.get("name", "") for t in fig["data"]}
        assert not any("onnxruntime" in n for n in names), title
        assert not any(
            abs(y - WRONG_MS) < 1
            for t in fig["data"]
            for y in t.get("y") or []
            if isinstance(y, (int, float))
        )


def test_failures_listed_with_reasons(report):
    _, o = report
    rows = o.page.locator("#failures + div table tr")
    texts = rows.all_inner_texts()[1:]
    assert len(texts) == 3
    statuses = [t for t in texts]
    assert any("wrong" in t and "max rel err 5.0e-01" in t for t in statuses)
    assert any("failed" in t and EVIL_REASON in t and EVIL_MODEL in t for t in statuses)
    assert any("skipped" in t and "oom at batch 8" in t for t in statuses)
    assert o.page.locator("#best-batch").count() == 1  # the spec asked for find_max_batch


@pytest.mark.parametrize(
    ("fixture", "notes", "figures"),
    [
        ("single_batch_runs", ["Only one batch size (1)", "Only one resolution (32)"], 3),
        ("failed_runs", ["No valid timings", "SIGSEGV"], 0),
        (None, ["No results"], 0),
    ],
)
def test_degenerate_runs(request, browser, tmp_path, fixture, notes, figures):
    runs = request.getfixturevalue(fixture) if fixture else []
    path = tmp_path / "report.html"
    path.write_text(render_html(runs))
    o = _open(browser, path)
    assert o.problems == [] and o.blocked == []
    assert o.page.get_attribute("body", "data-figure-count") == str(figures)
    assert o.page.locator("div.sc-plot .main-svg").count() >= figures
    text = o.page.inner_text("body")
    for note in notes:
        assert note in text
    assert "best batch size" not in text.lower()
    o.page.close()


def test_throughput_tables_have_a_gradient_and_a_bold_best(report):
    _, o = report
    tables = o.page.locator("table.throughput")
    mlp = [
        i for i in range(tables.count()) if "mlp" in tables.nth(i).locator("caption").inner_text()
    ]
    assert len(mlp) == 2
    for i in mlp:
        table = tables.nth(i)
        assert "throughput (samples/s)" in table.inner_text()
        best = table.locator("td.best")
        assert best.count() == 3  # one per batch-size column
        for j in range(best.count()):
            cell = best.nth(j)
            assert cell.evaluate("e => getComputedStyle(e).fontWeight") in ("700", "bold")
            row_name = cell.evaluate("e => e.parentElement.firstElementChild.innerText")
            assert row_name == "torchscript"
        colours = table.locator("td[style*='background-color']").evaluate_all(
            "cells => cells.map(c => c.style.backgroundColor)"
        )
        assert len(colours) == 6 and len(set(colours)) == 2  # per-column min and max


def test_selector_switches_the_visible_sweep(report):
    _, o = report
    fig = o.page.locator("#sc-fig-0")  # latency vs batch size: one entry per resolution
    assert fig.locator(".gtitle").text_content().endswith("res 32 px")
    fig.scroll_into_view_if_needed()  # mouse clicks need it inside the viewport
    header = fig.locator(".updatemenu-header").bounding_box()
    o.page.mouse.click(header["x"] + 20, header["y"] + header["height"] / 2)
    option = fig.locator(".updatemenu-dropdown-button").nth(1).bounding_box()
    o.page.mouse.click(option["x"] + 20, option["y"] + option["height"] / 2)
    o.page.wait_for_function(
        "document.querySelector('#sc-fig-0 .gtitle').textContent.endsWith('res 64 px')"
    )
    visible = o.page.evaluate("document.getElementById('sc-fig-0').data.map(t => t.visible)")
    assert visible == sorted(visible) and True in visible and False in visible
    assert o.problems == []


def test_quantized_cells_render_with_the_pareto_figure(browser, tmp_path):
    from tests.report.quant_fixtures import quant_run

    path = tmp_path / "quant.html"
    path.write_text(render_html([quant_run()]))
    o = _open(browser, path)
    assert o.problems == [] and o.blocked == []
    section = o.page.locator("#quantization ~ div.sc-plot").first
    assert section.locator(".main-svg").count() > 0
    assert "slower than fp32" in " ".join(section.locator("text").all_text_contents())
    slower = o.page.locator("table.quant-study td.slower")
    assert slower.inner_text().replace("\n", " ") == "0.80× slower"
    assert slower.evaluate("e => getComputedStyle(e).fontWeight") in ("700", "bold")
    o.page.close()
