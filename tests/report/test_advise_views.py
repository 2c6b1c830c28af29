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
    return Advice(
        model="net", objective="latency", constraints={"max_quality_loss": 1.0},
        constraints_words="quality lost ≤ 1", margin=0.25, threshold=0.03, budget_s=60,
        id="20261206-advice-x", recommended=entries[0], runner_up=entries[1],
        entries=entries, **fields,
    )  # fmt: skip


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
