"""Quantized cells in every view: speed over the same rung's fp32 (a slower one marked,
never hidden), weight sizes in MB beside fp32's, the accuracy cost (top-1 agreement, KL,
max rel err), the Pareto figure, the study's quantized table and the machine's int8 ISA.
Stores from before quantization (no agreement, no record) read as they always did."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pandas as pd
import pytest
from rich.console import Console

from stackcost.report.exports.formats import export
from stackcost.report.figures.write import write_figures
from stackcost.report.frames import pareto, quant, study, tidy
from stackcost.report.html import plots
from stackcost.report.html.page import render_html
from stackcost.report.terminal.run import fp32_speedups, results_table
from stackcost.store.heldout import HeldoutResult, key
from stackcost.verify import Verification
from tests.report.quant_fixtures import FP32_BYTES, quant_rep, quant_run


@pytest.fixture(scope="module")
def run():
    return quant_run()


@pytest.fixture(scope="module")
def summ(run):
    return tidy.summary([run])


def _row(summ: pd.DataFrame, backend: str, precision: str) -> pd.Series:
    (i,) = summ.index[(summ["backend"] == backend) & (summ["precision"] == precision)]
    return summ.loc[i]


def render(table) -> str:
    console = Console(record=True, width=320)
    console.print(table)
    return console.export_text()


def test_speedup_over_the_same_rungs_fp32(summ):
    assert _row(summ, "eager", "int8-dyn")["speedup_vs_fp32"] == pytest.approx(2.0)
    assert _row(summ, "eager", "w8")["speedup_vs_fp32"] == pytest.approx(1.25)
    # onnxruntime's own fp32 (4 ms), not eager's (10 ms): 0.8x, slower.
    assert _row(summ, "onnxruntime", "int8")["speedup_vs_fp32"] == pytest.approx(0.8)
    wrong = _row(summ, "onnxruntime", "w4")
    assert math.isnan(wrong["speedup_vs_fp32"]) and wrong["fp32_status"] == ""
    assert math.isnan(_row(summ, "eager", "fp32")["speedup_vs_fp32"])
    # The readouts reach the cells, the worst repetition's; a wrong cell keeps its own.
    assert wrong["top1"] == pytest.approx(0.6) and wrong["weight_bytes"] == 1_050_000
    assert _row(summ, "onnxruntime", "int8")["fp32_weight_bytes"] == FP32_BYTES


def test_old_stores_have_no_quantization_columns(runs):
    summ = tidy.summary(runs)
    assert not set(tidy.QUANT_COLUMNS) & set(summ.columns)
    assert "speedup_vs_fp32" not in summ
    assert "top1" not in tidy.frame(runs)
    assert "vs fp32" not in export(runs, "md")


def test_a_quantized_repetition_without_readouts_shows_dashes():
    rep = quant_rep("eager", "int8-dyn")
    bare = rep.model_copy(
        update={
            "details": {},
            "verification": Verification(max_abs_err=0, max_rel_err=0, tolerance=0.15, ok=True),
        }
    )
    run = quant_run()
    run = dataclasses.replace(
        run, records=[(c, bare if c.precision == "int8-dyn" else r) for c, r in run.records]
    )
    summ = tidy.summary([run])
    cells = quant.quant_cells(next(summ[summ["precision"] == "int8-dyn"].itertuples()))
    assert cells == ["2.00× faster", "—", "—", "—", "—"]
    assert "2.00× faster" in render(results_table(run))


def test_text_helpers():
    assert quant.speedup_text(0.8, "ok") == "0.80× slower"
    assert quant.speedup_text(0.996, "ok") == "0.996× slower"  # never "1.00× slower"
    assert quant.speedup_text(1.5, "unstable") == "1.50×? faster"
    assert quant.speedup_text(float("nan"), "ok") == quant.speedup_text(2.0, "") == "—"
    assert quant.weights_text(2_100_000, 8_400_000) == "2.1 MB / 8.4 MB fp32"
    assert quant.top1_text(1.0, 1) == "100.0% of 1 row"  # one argmax is a coin
    assert quant.top1_text(0.97, 64) == "97.0%"
    assert quant.kl_text(math.inf) == "inf"


def test_pareto_front():
    # (speedup, drop): (2, 3) and (1.25, 0) beat (1.1, 1) and (0.8, 5).
    points = [(1.0, 0.0), (2.0, 3.0), (1.1, 1.0), (0.8, 5.0), (1.25, 0.0)]
    assert quant.front(points) == [4, 1]


def test_isa_features_name_what_an_old_store_never_checked(run):
    assert quant.isa_text(run.env) == (
        "AVX2 yes · AVX-512 VNNI yes · AVX-VNNI no · AMX-INT8 no · AVX-512 BF16 no"
    )
    old = {"cpu": {"model": "x", "flags": ["avx2", "avx512_vnni"]}}  # before flags_checked
    assert "AVX-VNNI not recorded · AMX-INT8 not recorded · AVX-512 BF16 no" in quant.isa_text(old)
    assert quant.isa_text({}) == "" and quant.isa_lines([("a", {})]) == []


def test_a_narrowed_run_says_so_beside_the_cpus_flags(run):
    from stackcost.env import isa_caps

    caps = isa_caps({"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "X": "1"})
    narrowed = {**run.env, "isa_caps": caps}
    assert quant.isa_text(narrowed).endswith(
        "AMX-INT8 no · AVX-512 BF16 no · narrowed by ONEDNN_MAX_CPU_ISA=AVX2, "
        "ATEN_CPU_CAPABILITY=avx2"
    )
    assert "narrowed" not in quant.isa_text({**run.env, "isa_caps": isa_caps({})})
    # two runs, one narrowed: two lines, each naming its runs
    assert len(quant.isa_lines([("a", run.env), ("b", narrowed)])) == 2


def test_terminal_table_marks_the_slower_cell(run):
    table = results_table(run)
    text = render(table)
    line = next(x for x in text.splitlines() if "│     int8 │" in x)
    assert "0.80× slower" in line and "2.1 MB / 8.4 MB fp32" in line and "95.0%" in line
    assert "2.00× faster" in text and "prec" in text  # several precisions: a column
    assert "ISA features that decide int8 speed: AVX2 yes" in text
    speeds = fp32_speedups(run.cells())
    assert sorted(round(r.value, 2) for r in speeds.values()) == [0.8, 1.25, 2.0]
    # Rich styles the slower speedup red.
    column = next(c for c in table.columns if str(c.header) == "vs fp32")
    assert any(getattr(t, "style", "") == "bold red" for t in column._cells)


def test_markdown_csv_json(run):
    md = export([run], "md")
    header = next(line for line in md.splitlines() if line.startswith("| model"))
    for name in ("vs fp32", "weights (MB)", "fp32 weights (MB)", "top-1 agreement (%)", "KL"):
        assert name in header
    assert "**0.80× slower**" in md and "| 2.1 | 8.4 | 95.0 | 0.01 |" in md
    assert "ISA features that decide int8 speed" in md
    assert ": quantized precisions" in md  # the study's quantized table
    csv = export([run], "csv")
    assert "top1,kl,agreement_rows,weight_bytes,fp32_weight_bytes" in csv.splitlines()[0]
    payload = json.loads(export([run], "json"))
    cell = next(c for c in payload["cells"] if c["precision"] == "int8")
    assert cell["speedup_vs_fp32"] == pytest.approx(0.8) and cell["weight_bytes"] == 2_100_000
    assert "speedup_vs_fp32" in payload["units"] and "top1" in payload["units"]


def test_study_quant_table(run):
    (t,) = study.quant_tables([run])
    assert t.header[:3] == [
        "fp32 throughput (samples/s)",
        "int8-dyn vs fp32",
        "int8-dyn top-1 agreement (%)",
    ]
    rows = dict(t.rows)
    assert rows["eager"][:3] == ["800", "2.00× faster", "97.0"]
    int8 = t.header.index("int8 vs fp32")
    assert rows["onnxruntime"][int8] == "0.80× slower" and ("onnxruntime", int8) in t.slower
    w4 = t.header.index("w4 vs fp32")
    assert rows["onnxruntime"][w4 : w4 + 2] == ["wrong", "60.0"]
    assert study.quant_tables([dataclasses.replace(run, records=run.records[:2])]) == []


def test_pareto_panels_and_note(summ):
    (p,) = pareto.panels(summ)
    assert p.metric == "agreement" and p.model == "mlp"
    pts = p.points.set_index(["series", "precision"])
    assert pts.loc[("onnxruntime", "int8"), "slower"]
    assert not pts.loc[("onnxruntime", "int8"), "on_front"]
    assert pts.loc[("eager", "int8-dyn"), "on_front"] and pts.loc[("eager", "w8"), "on_front"]
    assert pts.loc[("eager", "int8-dyn"), "drop"] == pytest.approx(3.0)
    assert ("onnxruntime", "w4") not in pts.index  # wrong: no valid timing
    assert "1 wrong" in pareto.note(summ)
    xs, ys = pareto.front_line(p)
    assert xs[0] == 1.0 and ys[0] == 0.0 and xs == sorted(xs)


def _with_heldout(run, metric: str, value: float, skip: str = ""):
    """`run` with a stored held-out row of `metric` for each quantized cell but `skip`'s."""
    rows = {
        key(c.model, c.backend, c.precision): HeldoutResult(
            "h", c.backend, c.precision, "ok", metric, value, {}
        )
        for c, _ in run.records
        if c.precision != "fp32" and c.precision != skip
    }
    return dataclasses.replace(run, heldout=rows)


@pytest.mark.parametrize(
    ("metric", "unit"), [("accuracy_drop_pt", "pt"), ("ppl_increase_pct", "% ppl")]
)
def test_stored_heldout_quality_is_preferred_where_every_point_has_it(metric, unit):
    summ = tidy.summary([_with_heldout(quant_run(), metric, 2.0)])
    (p,) = pareto.panels(summ)
    assert p.metric == metric and pareto.UNIT[p.metric] == unit
    assert p.points["drop"].tolist() == pytest.approx([2.0] * len(p.points))
    fig, _ = plots.pareto_figure(summ, {})
    assert fig.layout.yaxis.title.text == pareto.Y_LABEL[metric]
    # One point without a held-out row: the panel falls back to agreement, never mixes.
    (p,) = pareto.panels(tidy.summary([_with_heldout(quant_run(), metric, 2.0, skip="w8")]))
    assert p.metric == "agreement"


def test_pareto_figure(summ):
    fig, note = plots.pareto_figure(summ, {"eager": "#0072B2", "onnxruntime": "#E69F00"})
    names = [t.name for t in fig.data]
    assert "onnxruntime · int8" in names and "Pareto front" in names
    slower = next(t for t in fig.data if t.name == "onnxruntime · int8")
    assert slower.marker.line.color == (plots.SLOWER_COLOR,)
    assert any(s.x1 == 1 for s in fig.layout.shapes)  # the slower side, shaded
    assert "1 wrong" in note
    none, why = plots.pareto_figure(summ[summ["precision"] == "fp32"], {})
    assert none is None and why


def test_figure_file_per_model(run, tmp_path):
    stems = {p.name for p in write_figures([run], tmp_path)}
    assert {"quant_pareto-mlp.png", "quant_pareto-mlp.pdf"} <= stems


def test_html_section_marks_the_slower_cell(run, runs):
    html = render_html([run])
    assert 'id="quantization"' in html and "What each rung built" in html
    assert re.search(r'<td class="slower">0\.80× slower</td>', html)  # the study's table
    assert re.search(r'class="text slower">0\.80× slower</td>', html)  # the built table
    assert "a &lt;b&gt;note&lt;/b&gt; from the tool" in html  # a tool's note is text
    assert '<th class="text">ISA features that decide int8 speed</th>' in html  # environment
    old = render_html(runs)
    assert 'id="quantization"' not in old


def test_fp32_from_another_run_counts_only_on_the_same_machine():
    run = quant_run()
    fp32 = [(c, r) for c, r in run.records if c.precision == "fp32"]
    int8 = [(c, r) for c, r in run.records if c.precision != "fp32"]
    other_box = {**run.env, "hostname": "elsewhere"}
    same = [
        dataclasses.replace(run, run_id="a", records=fp32),
        dataclasses.replace(run, run_id="b", records=int8),
    ]
    summ = tidy.summary(same)
    assert _row(summ, "eager", "int8-dyn")["speedup_vs_fp32"] == pytest.approx(2.0)
    apart = [same[0], dataclasses.replace(same[1], env=other_box)]
    summ = tidy.summary(apart)
    assert summ["speedup_vs_fp32"].isna().all()  # another machine's fp32 never divides
    assert "without a valid fp32 cell" in pareto.note(summ)


def test_a_decoders_generate_cells_get_a_pareto_of_their_own(tmp_path):
    """Generate cells leave the timed loop's views, not the trade-off: their TPOT p50
    against the held-out perplexity stored for the same weights, rung and precision."""
    from stackcost.report.html.generate import generation_pareto
    from stackcost.report.html.slots import Figures

    run = _with_heldout(quant_run(), "ppl_increase_pct", 0.5)
    sizes = {"prompt_len": 8, "new_tokens": 4}
    generate = [
        (c.model_copy(update={"mode": "generate", "sizes": sizes}), r) for c, r in run.records
    ]
    run = dataclasses.replace(run, records=generate)
    figs = Figures()
    slot = generation_pareto([run], "eager", figs)
    assert slot is not None and slot["id"] and len(figs.items) == 1
    assert pareto.Y_LABEL["ppl_increase_pct"] in figs.items[0]["json"]
    assert "quant_pareto-mlp.png" in {p.name for p in write_figures([run], tmp_path)}
    fp32 = dataclasses.replace(run, records=[x for x in generate if x[0].precision == "fp32"])
    assert generation_pareto([fp32], "eager", Figures()) is None
