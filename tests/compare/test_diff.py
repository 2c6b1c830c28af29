"""Matching cells between two sides: presence and status verdicts, per-metric thresholds."""

from __future__ import annotations

from stackcost.commands.compare import thresholds
from stackcost.compare.diff import Side, compare_sides
from stackcost.compare.render import markdown
from stackcost.measure.stats import summarize
from stackcost.result import Memory, RepetitionResult
from stackcost.store.runs import CellResult
from tests.conftest import tiny_cell


def cell_result(backend: str, ms: float = 1.0, status: str = "ok", mem: int = 100) -> CellResult:
    reps = []
    for i in range(3):
        samples = [int(ms * 1e6 * (1 + 0.01 * ((j * 7 + i) % 5 - 2))) for j in range(40)]
        reps.append(
            RepetitionResult(
                status=status,
                repetition=i,
                reason="boom" if status == "failed" else "",
                stats=summarize(samples),
                samples_ns=samples,
                throughput=2 / (ms / 1e3),
                memory=Memory(
                    baseline_rss_bytes=0, peak_rss_bytes=mem + i, peak_over_baseline_bytes=mem
                ),
                cold_start_ms=5.0,
            )
        )
    return CellResult(tiny_cell(backend), reps)


def side(*cells: CellResult) -> Side:
    return Side("x", {c.cell.key(): c for c in cells})


def test_presence_status_and_metric_verdicts():
    base = side(
        cell_result("eager"),
        cell_result("torchscript"),
        cell_result("onnxruntime", status="failed"),
        cell_result("openvino"),
        cell_result("inductor", mem=100),
    )
    cand = side(
        cell_result("eager", ms=1.8),
        cell_result("torchscript", status="failed"),
        cell_result("onnxruntime"),
        cell_result("export_aot"),
        cell_result("inductor", mem=120),
    )
    cmp = compare_sides(base, cand)
    verdicts = {c.cell.backend: c.verdict for c in cmp.cells}
    assert verdicts == {
        "eager": "regressed",
        "torchscript": "newly failing",
        "onnxruntime": "fixed",
        "openvino": "missing",
        "export_aot": "new",
        "inductor": "regressed",  # peak memory +20%
    }
    assert cmp.failed
    # A looser memory threshold clears the memory regression only.
    loose = compare_sides(base, cand, thresholds(0.07, ["peak_memory=0.5"]))
    assert {c.cell.backend: c.verdict for c in loose.cells}["inductor"] == "unchanged"
    text = markdown(cmp, {"default": 0.07}, 0.05)
    assert text.startswith("❌") and "newly failing (failed: boom)" in text


def test_identical_sides_pass():
    cmp = compare_sides(side(cell_result("eager")), side(cell_result("eager")))
    assert not cmp.failed and cmp.cells[0].verdict == "unchanged"
