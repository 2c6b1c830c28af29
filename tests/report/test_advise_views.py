"""advise's answer in every view: the frames' rows and Pareto points, the markdown, and
the HTML report's section with its figure."""

from __future__ import annotations

from stackcost.advise.advice import Advice, Entry
from stackcost.report.exports.advise import markdown
from stackcost.report.frames.advise import header, pareto_points, row
from stackcost.report.html.page import render_html
from stackcost.report.units import ms


def entry(label, median, loss, *, decision="kept", status="ok", phase="screening", memory=2**20):
    backend, precision = label.split()[:2]
    return Entry(
        label=label, backend=backend, precision=precision, batch_size=1, threads=1,
        phase=phase, status=status, decision=decision, median_ms=median, tail_ms=median,
        throughput=1000 / median, memory_bytes=memory, quality_loss=loss,
        quality=f"{loss:+.2g} pt" if loss is not None else "",
    )  # fmt: skip


def answer(**fields) -> Advice:
    entries = [
        entry("onnxruntime int8 b1", 2.0, 0.5, decision="recommended", phase="final"),
        entry("onnxruntime fp32 b1", 4.0, 0.0, decision="runner-up", phase="final"),
        entry("openvino int8 b1", 3.0, 0.8),  # slower and lost more: off the front
        entry("eager fp32 b1", 9.0, 0.0),  # as lossless as onnxruntime fp32, slower: off
        entry("openvino fp32 b2", 5.0, None, status="estimated", decision="pruned on an estimate"),
    ]
    base = dict(
        model="net", objective="latency", constraints={"max_quality_loss": 1.0},
        constraints_words="quality lost ≤ 1", margin=0.25, threshold=0.03, budget_s=60,
        id="20261206-advice-x", recommended=entries[0], runner_up=entries[1], entries=entries,
    )  # fmt: skip
    return Advice(**{**base, **fields})


def test_the_front_is_the_cells_no_other_beats_on_latency_and_quality_lost():
    points = {p.label: p for p in pareto_points(answer())}
    assert "openvino fp32 b2" not in points  # an estimate is not a measurement
    front = {label for label, p in points.items() if p.on_front}
    assert front == {"onnxruntime int8 b1", "onnxruntime fp32 b1"}
    assert points["onnxruntime int8 b1"].role == "recommended"


def test_a_decoder_answer_shows_tpot_and_ttft():
    a = answer(mode="generate")
    a.entries[0].ttft_ms = 120.0
    assert "TTFT" in header(a) and "tokens/s" in header(a)
    assert ms(120.0) in row(a.entries[0], a)
    assert "| TPOT |" in markdown(a)


def test_the_html_report_shows_the_answer_and_its_pareto_figure():
    html = render_html([], advice=[answer()])
    assert 'id="advice"' in html and "deploy onnxruntime int8 b1" in html
    assert "Pareto front" in html and "quality lost held out" in html
    assert "pruned on an estimate" in html


def test_the_printed_figure_draws_each_measured_cell_and_the_front(tmp_path):
    from stackcost.report.figures.advise import advice_figure, advice_figures

    fig = advice_figure(answer())
    ax = fig.axes[0]
    marked = {"recommended: onnxruntime int8 b1", "runner-up: onnxruntime fp32 b1"}
    cells = [c for c in ax.collections if c.get_label() not in marked]
    assert sum(len(c.get_offsets()) for c in cells) == 4  # the estimate is left out
    front = next(line for line in ax.get_lines() if line.get_label() == "Pareto front")
    assert list(front.get_xdata()) == [2.0, 4.0]
    assert marked <= {c.get_label() for c in ax.collections}
    assert "quality lost held out" in ax.get_ylabel()
    paths = advice_figures(answer(), tmp_path, "answer-pareto")
    assert [p.name for p in paths] == ["answer-pareto.png", "answer-pareto.pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_without_a_quality_bound_the_figure_trades_latency_for_memory():
    from stackcost.report.figures.advise import advice_figure

    a = answer(constraints={})
    assert "peak RSS" in advice_figure(a).axes[0].get_ylabel()
    none_measured = answer(entries=[], recommended=None, runner_up=None)
    assert advice_figure(none_measured) is None


def test_the_markdown_links_its_figure():
    text = markdown(answer(), "answer-pareto.png")
    assert "](answer-pareto.png)" in text and text.index("![") < text.index("| cell |")
    assert "![" not in markdown(answer())


def test_a_served_answer_shows_the_rate_held_and_its_p99s():
    a = answer(mode="serve", objective="throughput", constraints={})
    a.entries[0].ttft_ms, a.entries[0].throughput = 40.0, 820.0
    assert header(a)[3:6] == ("rate held", "TPOT p99", "TTFT p99")
    assert row(a.entries[0], a)[3:6] == ["820.0 req/s", ms(2.0), ms(40.0)]
    assert "holds 820.0 req/s within the SLO" in markdown(a)
    assert "one short sweep a cell" in markdown(a)
