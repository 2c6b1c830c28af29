"""A run mixing an image model, a sequence model and one without size axes: every view
labels each size axis by its name and unit, and no cell is dropped for lacking one."""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest
from rich.console import Console

from stackcost.cell import Cell, ModelRef
from stackcost.measure.stats import summarize
from stackcost.report.exports.formats import export
from stackcost.report.frames import tidy
from stackcost.report.html.page import render_html
from stackcost.report.terminal.run import results_table
from stackcost.result import Memory, RepetitionResult
from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from stackcost.verify import Verification

MLP = ModelRef(name="mlp", num_classes=10, in_channels=1)
BERT = ModelRef(name="bert-base", num_classes=0)
DLRM = ModelRef(name="dlrm-small", num_classes=0)
SIZED = [
    (MLP, {"resolution": 32}),
    (MLP, {"resolution": 64}),
    (BERT, {"seq_len": 128}),
    (BERT, {"seq_len": 256}),
    (DLRM, {}),
]


def _rep(cell: Cell, rep: int, scale: float) -> RepetitionResult:
    ms = scale * (1 + sum(cell.sizes.values()) / 64) * (1 + 0.01 * rep)
    samples = [int(ms * 1e6 * (1 + 0.01 * (i % 5))) for i in range(20)]
    stats = summarize(samples)
    return RepetitionResult(
        status="ok",
        repetition=rep,
        stats=stats,
        samples_ns=samples,
        throughput=cell.batch_size / (stats.median_ms / 1e3),
        cold_start_ms=10.0,
        memory=Memory(
            baseline_rss_bytes=100 * 2**20,
            peak_rss_bytes=200 * 2**20,
            peak_over_baseline_bytes=100 * 2**20,
        ),
        verification=Verification(max_abs_err=0.0, max_rel_err=0.0, tolerance=1e-4, ok=True),
    )


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> list[RunResult]:
    path = tmp_path_factory.mktemp("sizes") / "s.db"
    with Store(path) as store:
        run_id = store.create_run({}, {})
        for backend, scale in (("eager", 1.0), ("torchscript", 0.5)):
            for model, sizes in SIZED:
                cell = Cell(model=model, backend=backend, sizes=sizes)
                cell_id = store.add_cell(run_id, cell)
                for rep in range(2):
                    store.add_repetition(cell_id, _rep(cell, rep, scale))
        store.finish_run(run_id)
        return [RunResult.from_store(store, run_id)]


def test_terminal_table_has_a_column_per_size_axis(mixed):
    console = Console(file=io.StringIO(), width=300)
    console.print(results_table(mixed[0]))
    lines = console.file.getvalue().splitlines()
    # Headings may take two lines (the unit under the name): join each column's parts.
    head = [[c.strip() for c in line.strip()[1:-1].split("┃")] for line in lines if "┃" in line]
    cols = [" ".join(filter(None, parts)) for parts in zip(*head, strict=True)]
    assert "resolution (px)" in cols and "seq len (tokens)" in cols
    assert "res" not in cols
    rows = [[c.strip() for c in line.strip()[1:-1].split("│")] for line in lines]
    res, seq = cols.index("resolution (px)"), cols.index("seq len (tokens)")
    bert = [r for r in rows if r[0] == "bert-base"]
    assert {r[seq] for r in bert} == {"128", "256"} and {r[res] for r in bert} == {""}
    dlrm = [r for r in rows if r[0] == "dlrm-small"]
    assert len(dlrm) == 2 and {(r[res], r[seq]) for r in dlrm} == {("", "")}
    assert all(r[cols.index("vs eager")] != "—" for r in bert + dlrm)  # baselines found


def test_no_cell_is_dropped_for_lacking_an_axis(mixed):
    summ = tidy.summary(mixed)
    assert len(summ) == 2 * len(SIZED)
    assert tidy.size_columns(summ) == ["resolution", "seq_len"]
    ts = summ[summ["backend"] == "torchscript"]
    assert ts["time_ratio"].notna().all()  # dlrm's and bert's ratios too
    assert set(summ["sizes"]) == {"32 px", "64 px", "128 tokens", "256 tokens", ""}
    assert {t.title for t in tidy.throughput_tables(summ)} == {
        "mlp · res 32 px",
        "mlp · res 64 px",
        "bert-base · seq len 128 tokens",
        "bert-base · seq len 256 tokens",
        "dlrm-small",
    }
    (seq,) = tidy.sweeps(summ, "seq_len")
    assert seq.model == "bert-base" and list(seq.cells["seq_len"].unique()) == [128, 256]
    assert [s.model for s in tidy.sweeps(summ, "resolution")] == ["mlp"]
    assert {s.model for s in tidy.sweeps(summ, "batch_size")} == set()  # one batch each


def test_html_labels_each_axis_by_name_and_unit(mixed):
    page = render_html(mixed)
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", page)
    assert "resolution (px)" in headers and "seq len (tokens)" in headers
    assert "res (px)" not in headers and "res" not in headers
    figures = [
        json.loads(f.replace("\\u003c", "<").replace("\\u003e", ">").replace("\\u0026", "&"))
        for f in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
    ]
    titles = {f["layout"]["title"]["text"]: f["layout"].get("xaxis", {}) for f in figures}
    seq = titles["latency vs seq len: bert-base"]
    assert seq["title"]["text"].startswith("seq len (tokens)")
    res = titles["latency vs resolution: mlp"]
    assert res["title"]["text"].startswith("resolution (px)")


def test_exports_label_each_axis(mixed):
    md_header = export(mixed, "md").splitlines()[0]
    assert "| resolution (px) | seq len (tokens) |" in md_header and "res " not in md_header
    csv = pd.read_csv(io.StringIO(export(mixed, "csv")))
    bert = csv[csv["model"] == "bert-base"]
    assert set(bert["sizes"]) == {"128 tokens", "256 tokens"}
    assert bert["resolution"].isna().all() and set(bert["seq_len"]) == {128, 256}
    mlp = csv[csv["model"] == "mlp"]
    assert set(mlp["sizes"]) == {"32 px", "64 px"} and mlp["seq_len"].isna().all()
    assert len(csv) == 2 * 2 * len(SIZED)
    payload = json.loads(export(mixed, "json"))
    assert payload["units"]["resolution"] == "px" and payload["units"]["seq_len"] == "tokens"
    cell = next(c for c in payload["cells"] if c["model"] == "bert-base")
    assert cell["resolution"] is None and cell["seq_len"] in (128, 256)


def test_list_models_shows_inputs_and_size_axes(capsys):
    from stackcost.cli import main

    assert main(["list", "models"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # wrapped lines rejoined
    assert "input_ids int64[batch, seq_len]" in out
    assert "--seq-len 128 tokens (max 512)" in out and "--resolution 224 px (min 32)" in out
    assert "hf:<model_type>" in out and "package.module:ATTR" in out
