"""The suite summary at several precisions, on fabricated runs: each precision is its own
table, and each quantized precision gives every rung's speedup over its own fp32 cell,
geomean over the models where both are ok, with every other model counted and named."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from scipy.stats import gmean

from stackcost.cell import Cell
from stackcost.report.frames.suite import summarize, versus_line
from stackcost.report.html.suite import suite_section
from stackcost.report.terminal.suite import summary_renderables
from stackcost.result import Memory, RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.runspec.suite import Expected
from stackcost.store.runs import RunResult
from stackcost.verify import Verification


def _rep(status: str = "ok", median_ms: float = 1.0, reason: str = "") -> RepetitionResult:
    measured = status in ("ok", "unstable", "disturbed", "wrong")
    return RepetitionResult(
        status=status,
        reason=reason,
        samples_ns=[int(median_ms * 1e6)] * 9 if measured else [],
        memory=Memory(baseline_rss_bytes=1000, peak_rss_bytes=1100, peak_over_baseline_bytes=100)
        if measured
        else None,
        verification=Verification(
            max_abs_err=0, max_rel_err=0, tolerance=0.15, ok=status != "wrong"
        )
        if measured
        else None,
    )


def _run(
    run_id: str, model: str, size: int, cells: dict[tuple[str, str], RepetitionResult]
) -> RunResult:
    """One suite entry's run: its cells by (backend, precision)."""
    ref = model_ref(model)
    records = [
        (Cell(model=ref, backend=b, sizes={"resolution": size}, precision=p, threads=1), rep)
        for (b, p), rep in cells.items()
    ]
    backends = list(dict.fromkeys(b for b, _ in cells))
    return RunResult(run_id, Path("x.db"), {}, {"backends": backends}, records)


def _runs() -> list[RunResult]:
    """Four models at fp32 and int8 on eager and onnxruntime."""
    return [
        _run(
            "r1",
            "mlp",
            8,
            {
                ("eager", "fp32"): _rep(median_ms=4.0),
                ("onnxruntime", "fp32"): _rep(median_ms=2.0),
                ("eager", "int8"): _rep(median_ms=8.0),  # slower than its fp32
                ("onnxruntime", "int8"): _rep(median_ms=1.0),
            },
        ),
        _run(
            "r2",
            "mnist-cnn",
            28,
            {
                ("eager", "fp32"): _rep(median_ms=9.0),
                ("onnxruntime", "fp32"): _rep(median_ms=3.0),
                ("eager", "int8"): _rep(median_ms=18.0),
                ("onnxruntime", "int8"): _rep(median_ms=0.5),
            },
        ),
        _run(
            "r3",
            "resnet18",
            32,
            {
                ("eager", "fp32"): _rep(median_ms=4.0),
                ("onnxruntime", "fp32"): _rep(median_ms=2.0),
                ("eager", "int8"): _rep("wrong", 1.0, "top-1 0.41 < 0.90"),
                ("onnxruntime", "int8"): _rep("unsupported", reason="no int8 Conv\nat opset 9"),
            },
        ),
        _run(
            "r4",
            "resnet50",
            32,
            {
                ("eager", "fp32"): _rep("unstable", 6.0),
                ("onnxruntime", "fp32"): _rep("failed", reason="export failed"),
                ("eager", "int8"): _rep(median_ms=3.0),
                ("onnxruntime", "int8"): _rep(median_ms=1.0),
            },
        ),
    ]


def test_each_precision_is_its_own_table_and_mean():
    s = summarize(_runs(), "q")
    assert s.groups == [("infer", "fp32"), ("infer", "int8")]
    assert [r.label for r in s.rows_of("infer", "int8")][0] == "mlp b1 8 px int8"
    fp32 = s.geomean("infer", "onnxruntime", precision="fp32")
    assert fp32.value == pytest.approx(gmean([2.0, 3.0, 2.0])) and (fp32.n, fp32.of) == (3, 4)
    # int8 rows against eager at int8, never mixed with fp32's.
    int8 = s.geomean("infer", "onnxruntime", precision="int8")
    assert int8.value == pytest.approx(gmean([8.0, 36.0, 3.0])) and int8.of == 4


def test_the_quantized_speedup_is_each_rung_over_its_own_fp32_where_both_are_ok():
    s = summarize(_runs(), "q")
    assert s.quantized("infer") == ["int8"]
    ort = s.versus_fp32("infer", "int8", "onnxruntime")
    # mlp 2/1, mnist-cnn 3/0.5; resnet18 unsupported, resnet50's fp32 failed.
    assert ort.value == pytest.approx(gmean([2.0, 6.0])) and (ort.n, ort.of) == (2, 4)
    eager = s.versus_fp32("infer", "int8", "eager")
    # mlp 4/8, mnist-cnn 9/18; resnet18 wrong; resnet50 over an unstable fp32: indicative.
    assert eager.value == pytest.approx(0.5) and (eager.n, eager.of) == (2, 4)
    wide = s.versus_fp32("infer", "int8", "eager", indicative=True)
    assert wide.n == 3 and wide.value == pytest.approx(gmean([0.5, 0.5, 2.0]))
    left = {(r.model, e.status, e.reason) for r, e in s.not_versus_fp32("infer", "int8", "eager")}
    assert left == {
        ("resnet18", "wrong", "top-1 0.41 < 0.90"),
        ("resnet50", "ok", "fp32 was unstable: ratio indicative"),
    }


def test_each_rung_says_its_coverage_and_names_what_it_leaves_out():
    s = summarize(_runs(), "q")
    line = versus_line(s, "infer", "int8", "onnxruntime")
    assert line.startswith("int8 on onnxruntime: 3.46× geomean, faster than fp32, over 2 of 4")
    assert "1 unsupported: resnet18 b1 32 px (at opset 9)" in line
    assert "1 no baseline: resnet50 b1 32 px (fp32 was failed: no baseline)" in line


def test_a_slowdown_reads_as_slower_never_as_a_bare_number():
    s = summarize(_runs(), "q")
    line = versus_line(s, "infer", "int8", "eager")
    assert "0.50× geomean, slower than fp32 (int8 takes 2.00× its time)" in line
    assert "0.79×? over 3 with unstable ones" in line  # gmean(0.5, 0.5, 2)
    assert "1 wrong: resnet18 b1 32 px (top-1 0.41 < 0.90)" in line
    assert "1 indicative: resnet50 b1 32 px" in line


def test_a_rung_with_no_model_says_so_and_missing_models_are_counted():
    runs = _runs()[:1]
    s = summarize(runs, "q", expected=[Expected("mlp b1 8 px", p) for p in ("fp32", "int8")])
    s2 = summarize(
        runs,
        "q",
        expected=[
            Expected(w, p) for w in ("mlp b1 8 px", "gpt2 b1 128 tokens") for p in ("fp32", "int8")
        ],
    )
    assert s.versus_fp32("infer", "int8", "onnxruntime").of == 1
    g = s2.versus_fp32("infer", "int8", "onnxruntime")
    assert (g.n, g.of) == (1, 2)
    assert "1 missing: gpt2 b1 128 tokens" in versus_line(s2, "infer", "int8", "onnxruntime")
    only_fp32 = summarize(
        [_run("r", "mlp", 8, {("eager", "int8"): _rep(), ("eager", "fp32"): _rep("crashed")})]
    )
    line = versus_line(only_fp32, "infer", "int8", "eager")
    assert line.startswith("int8 on eager: no geomean, over 0 of 1 models; 1 no baseline")


def test_renderings_carry_the_quantized_section():
    s = summarize(_runs(), "q")
    console = Console(width=250, record=True)
    console.print(summary_renderables(s))
    text = console.export_text()
    # (rich wraps a title to its table's width)
    assert "suite q · inference · cpu · int8: speedup over fp32 on" in text
    assert "suite q · inference · cpu · fp32: geometric means vs eager" in text
    assert "int8 on onnxruntime: 3.46× geomean, faster than fp32, over 2 of 4 models" in text
    assert "Not in the inference int8 means:" in text
    fragment = suite_section(s)
    assert "<h3>Inference · int8 vs fp32</h3>" in fragment
    assert "int8 on eager: 0.50× geomean, slower than fp32" in fragment
    assert 'title="slower than fp32"' in fragment


def test_a_single_precision_suite_reads_as_before():
    s = summarize(
        [_run("r", "mlp", 8, {("eager", "fp32"): _rep(), ("onnxruntime", "fp32"): _rep()})], "t"
    )
    assert s.groups == [("infer", "fp32")] and s.quantized("infer") == []
    console = Console(width=200, record=True)
    console.print(summary_renderables(s))
    text = console.export_text()
    assert "suite t · inference · cpu: geometric means vs eager" in text
    assert "fp32" not in text and "vs fp32" not in suite_section(s)


def test_where_eager_has_no_quantized_cell_one_line_says_so_instead_of_its_tables():
    no_int8 = "precision int8: torchao's static int8 is PT2E, lowered by Inductor"
    runs = [
        _run(
            f"r{i}",
            model,
            size,
            {
                ("eager", "fp32"): _rep(median_ms=4.0),
                ("inductor", "fp32"): _rep(median_ms=2.0),
                ("eager", "int8"): _rep("unsupported", reason=no_int8),
                ("inductor", "int8"): _rep(median_ms=1.0),
            },
        )
        for i, (model, size) in enumerate((("mlp", 8), ("mnist-cnn", 28)))
    ]
    s = summarize(runs, "q")
    console = Console(width=250, record=True)
    console.print(summary_renderables(s))
    text = console.export_text()
    assert (
        f"no table vs eager: eager gives no int8 baseline on any model (2 unsupported — {no_int8})"
        in text
    )
    assert "Not in the inference int8 means" not in text
    assert "int8 on inductor: 2.00× geomean, faster than fp32, over 2 of 2 models" in text
    assert "int8 on eager: no geomean, over 0 of 2 models; 2 unsupported: mlp b1 8 px" in text
    assert "No table vs eager" in suite_section(s)
