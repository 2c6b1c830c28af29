"""`stackcost suite`: the summary's math on synthetic runs, the suite file's refusals, and
one tiny end-to-end run (examples/suite-tiny.yaml) with its resume and --summary-only."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console
from scipy.stats import gmean

from stackcost.cell import Cell
from stackcost.cli import main
from stackcost.errors import SpecError
from stackcost.report.frames.suite import stored_runs, summarize
from stackcost.report.html.suite import suite_section
from stackcost.report.terminal.suite import summary_renderables
from stackcost.result import Memory, RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.runspec.suite import load_suite, suite_path
from stackcost.store.runs import RunResult
from stackcost.verify import Verification

ROOT = Path(__file__).resolve().parents[2]


# -- the summary on synthetic runs --------------------------------------------------------


def _rep(
    status: str = "ok",
    median_ms: float = 1.0,
    rss: int = 100,
    verified: bool = True,
    reason: str = "",
) -> RepetitionResult:
    measured = status in ("ok", "unstable", "disturbed", "wrong")
    return RepetitionResult(
        status=status,
        reason=reason,
        samples_ns=[int(median_ms * 1e6)] * 9 if measured else [],
        memory=Memory(
            baseline_rss_bytes=1000, peak_rss_bytes=1000 + rss, peak_over_baseline_bytes=rss
        )
        if measured
        else None,
        verification=Verification(max_abs_err=0, max_rel_err=0, tolerance=1e-4, ok=verified)
        if measured
        else None,
    )


def _run(run_id: str, model: str, size: int, cells: dict[str, RepetitionResult]) -> RunResult:
    ref = model_ref(model)
    records = [
        (Cell(model=ref, backend=b, sizes={"resolution": size}, threads=1), rep)
        for b, rep in cells.items()
    ]
    return RunResult(run_id, Path("x.db"), {}, {"backends": list(cells)}, records)


def _runs() -> list[RunResult]:
    return [
        _run(
            "r1",
            "mlp",
            8,
            {
                "eager": _rep(median_ms=2.0, rss=100),
                "torchscript": _rep(median_ms=1.0, rss=200),
                "onnxruntime": _rep(median_ms=0.5, rss=50),
            },
        ),
        _run(
            "r2",
            "mnist-cnn",
            28,
            {
                "eager": _rep(median_ms=9.0, rss=100),
                "torchscript": _rep(median_ms=1.0, rss=400),
                "onnxruntime": _rep("unsupported", reason="no ONNX for this\nop: aten::foo"),
            },
        ),
        _run(
            "r3",
            "resnet18",
            32,
            {
                "eager": _rep(median_ms=4.0),
                "torchscript": _rep("unstable", median_ms=1.0),  # valid, not trusted
                "onnxruntime": _rep(median_ms=1.0, verified=False),  # ok but not verified
            },
        ),
    ]


def test_geomean_over_trusted_verified_models_and_how_many():
    s = summarize(_runs(), "t")
    ts = s.geomean("infer", "torchscript")
    assert ts.value == pytest.approx(gmean([2.0, 9.0])) and (ts.n, ts.of) == (2, 3)
    ort = s.geomean("infer", "onnxruntime")
    assert ort.value == pytest.approx(4.0) and (ort.n, ort.of) == (1, 3)
    mem = s.geomean("infer", "torchscript", "cpu_memory")
    assert mem.value == pytest.approx(math.sqrt(2.0 * 4.0))
    eager = s.geomean("infer", "eager")
    assert eager.value == pytest.approx(1.0) and eager.n == 3
    # CPU cells: no device memory anywhere.
    assert s.geomean("infer", "torchscript", "device_memory").n == 0
    assert not s.has_device_memory


def test_models_a_backend_cannot_run_are_listed_with_status_and_reason():
    s = summarize(_runs(), "t")
    left = {(r.model, b): (e.status, e.reason) for r, b, e in s.not_counted("infer")}
    assert left[("mnist-cnn", "onnxruntime")] == ("unsupported", "op: aten::foo")
    assert left[("resnet18", "torchscript")][0] == "unstable"  # untrusted: no ratio
    assert left[("resnet18", "onnxruntime")] == ("ok", "not verified against the eager reference")
    assert len(left) == 3


def test_an_unstable_cell_gives_an_indicative_ratio_in_the_indicative_mean_only():
    s = summarize(_runs(), "t")
    unstable = next(r for r in s.rows if r.model == "resnet18").entries["torchscript"]
    assert unstable.indicative and unstable.speedup == pytest.approx(4.0)
    assert not unstable.counted
    trusted = s.geomean("infer", "torchscript")
    wide = s.geomean("infer", "torchscript", indicative=True)
    assert (trusted.n, wide.n) == (2, 3)
    assert wide.value == pytest.approx(gmean([2.0, 9.0, 4.0]))
    # Unverified and unsupported cells give no ratio, indicative or not.
    assert s.geomean("infer", "onnxruntime", indicative=True).n == 1
    assert s.has_indicative


def test_a_ratio_over_an_unstable_eager_is_indicative():
    runs = [
        _run("r", "mlp", 8, {"eager": _rep("unstable", 2.0), "torchscript": _rep(median_ms=1.0)}),
        _run("q", "mnist-cnn", 28, {"eager": _rep(median_ms=3.0), "torchscript": _rep()}),
    ]
    s = summarize(runs, "t")
    e = s.rows[0].entries["torchscript"]
    assert e.indicative and e.reason == "eager was unstable: ratio indicative"
    assert s.geomean("infer", "torchscript").value == pytest.approx(3.0)
    assert s.geomean("infer", "torchscript", indicative=True).value == pytest.approx(math.sqrt(6.0))


def test_an_untrusted_eager_leaves_its_model_out_of_every_mean():
    runs = [
        _run("r", "mlp", 8, {"eager": _rep("disturbed"), "torchscript": _rep(median_ms=0.1)}),
        _run("q", "mnist-cnn", 28, {"eager": _rep(median_ms=3.0), "torchscript": _rep()}),
    ]
    s = summarize(runs, "t")
    g = s.geomean("infer", "torchscript")
    assert g.value == pytest.approx(3.0) and (g.n, g.of) == (1, 2)
    reasons = {(r.model, b): e.reason for r, b, e in s.not_counted("infer")}
    assert reasons[("mlp", "torchscript")] == "eager was disturbed: no baseline"


def test_expected_models_without_a_run_are_rows_not_silence():
    s = summarize(_runs()[:1], "t", expected=["mlp b1 8 px", "gpt2 b1 128 tokens"])
    assert [r.label for r in s.rows] == ["mlp b1 8 px", "gpt2 b1 128 tokens"]
    assert s.geomean("infer", "torchscript").of == 2
    missing = [(r.label, b, e.status) for r, b, e in s.not_counted("infer")]
    assert ("gpt2 b1 128 tokens", "eager", "missing") in missing


def test_renderings_say_the_same_and_escape_foreign_text():
    runs = _runs()
    runs[1].records[2][1].reason = "<script>alert(1)</script> [bold]x[/bold]"
    s = summarize(runs, "t")
    console = Console(width=200, record=True)
    console.print(summary_renderables(s))
    text = console.export_text()
    assert "4.24× over 2/3" in text  # gmean(2, 9): the unstable third is left out
    assert "4.16×? over 3/3" in text  # and in the indicative mean, marked
    assert "4.00×?" in text  # its own ratio, marked
    assert "unverified" in text and "unsupported" in text
    assert "[bold]x[/bold]" in text  # not read as markup
    fragment = suite_section(runs, "t")
    assert fragment.startswith('<section id="suite">') and fragment.endswith("</section>")
    assert "<script>" not in fragment and "&lt;script&gt;" in fragment
    assert "4.24× over 2/3 · 4.16×? over 3/3" in fragment
    assert "<h2>Suite t</h2>" in fragment
    assert "CPU memory vs eager, per workload" in fragment
    assert "<h2>Suite summary</h2>" in suite_section(runs)  # runs of no named suite


# -- the suite file: refusals, one line, exit 2, nothing written ------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("models: [mlp]\nbackends: [eager, nope]\n", ":2: backends: unknown backend 'nope'"),
        ("models: []\n", ":1: models must not be empty"),
        ("models:\n  - {name: mlp, batchh: 2}\n", ":2: unknown key 'batchh'"),
        ("models:\n  - {name: mlp, batch: 0}\n", "models.0.batch = 0"),
        ("models: [nomodel]\n", "models[0]: unknown model 'nomodel'"),
        ("models:\n  - {name: mnist-cnn, size: 8}\n", "resolution"),
        ("models:\n  - {name: dlrm-small, size: 8}\n", "has no size axis"),
        ("models: [mlp]\nprotocol: {min_time: 1}\n", "unknown key protocol.min_time"),
        ("models: [mlp]\nthreads: 100000\n", "threads 100000 is more than"),
        ("models: [mlp, mlp]\n", "in the suite twice"),
        ("models: [mlp\n", "not valid YAML"),
        (
            "models: [mlp]\nprecisions: [fp32, int9]\n",
            ":2: precisions: unknown precision 'int9' (allowed: fp32, tf32, bf16, fp16, amp, "
            "int8-dyn, int8, w8, w4)",
        ),
        ("models: [mlp]\nprecisions: []\n", ":2: precisions must not be empty"),
        ("models: [mlp]\nprecisions: [int8, int8]\n", ":2: precisions: int8, int8 names one"),
        ("models: [mlp]\nprecisions: [int8]\nprecision: fp32\n", "precisions or precision"),
        ("models: [mlp]\nprecision: int4\n", ":2: precision: unknown precision 'int4'"),
        ("- mlp\n", "a suite is a mapping"),
    ],
)
def test_bad_suites_are_refused_in_one_line_and_nothing_is_written(
    tmp_path, capsys, text, expected
):
    spec = tmp_path / "suite-bad.yaml"
    spec.write_text(text)
    db = tmp_path / "s.db"
    assert main(["suite", str(spec), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stackcost: error: ") and err.count("\n") == 1, err
    assert expected in err, err
    assert not db.exists()


def test_flags_and_names_are_checked_before_anything_is_written(tmp_path, capsys):
    db = tmp_path / "s.db"
    for argv, expected in (
        (["suite", "nosuchsuite"], "no suite named 'nosuchsuite' (known: "),
        (["suite", "tiny", "--backends", "eager,bogus"], "--backends: unknown backend 'bogus'"),
        (["suite", "tiny", "--summary-only", "--force"], "--force does not apply"),
        (
            ["suite", "tiny", "--precisions", "fp32,int9"],
            "--precisions: unknown precision 'int9' (allowed: fp32, tf32, bf16, fp16, amp, "
            "int8-dyn, int8, w8, w4)",
        ),
        (["suite", "tiny", "--precisions", " , "], "--precisions ' , ': empty item at position 1"),
        (["suite", "tiny", "--precisions", "int8,int8"], "--precisions: int8, int8 names one"),
        (["suite", "tiny", "--summary-only"], "no such store"),
    ):
        assert main([*argv, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
    assert not db.exists()


def test_names_resolve_to_the_examples():
    assert suite_path("default") == ROOT / "examples" / "suite.yaml" or suite_path(
        "default"
    ) == Path("examples/suite.yaml")
    assert suite_path("tiny").name == "suite-tiny.yaml"


def test_the_default_suite_is_one_model_per_domain_through_six_rungs():
    from stackcost import zoo

    suite = load_suite(str(ROOT / "examples" / "suite.yaml"))
    assert suite.name == "default"
    domains = [zoo.MODELS[s.models[0].name].domain for s in suite.specs]
    assert len(set(domains)) == len(domains) == 6
    for spec in suite.specs:
        assert spec.repeats == 1 and spec.batch_sizes == [1]
        assert spec.protocol.target_ci == 0.05 and spec.protocol.max_time_s <= 10
        assert spec.backends == [
            "eager",
            "torchscript",
            "inductor",
            "export-aot",
            "onnxruntime",
            "openvino",
        ]


def test_precisions_are_an_axis_of_each_entry_with_fp32_beside_a_quantized_one(tmp_path):
    plain = load_suite("tiny")
    assert plain.precisions == ["fp32"] and all(s.precisions == ["fp32"] for s in plain.specs)
    quantized = load_suite("tiny", precisions=["int8"])
    assert quantized.precisions == ["fp32", "int8"]  # fp32: each rung's own baseline
    assert len(quantized.specs) == len(plain.specs)  # still one run per model
    assert all(s.precisions == ["fp32", "int8"] for s in quantized.specs)
    assert [e.label for e in quantized.expected()] == [
        "mlp b1 8 px",
        "mlp b1 8 px int8",
        "mnist-cnn b1 28 px",
        "mnist-cnn b1 28 px int8",
    ]
    # However spelled, the same set is the same spec: a rerun resumes it.
    spelled = load_suite("tiny", precisions=["int8", "fp32"])
    assert [s.digest() for s in spelled.specs] == [s.digest() for s in quantized.specs]
    assert load_suite("tiny", precisions=["bf16"]).precisions == ["bf16"]  # not quantized
    file = tmp_path / "suite-old.yaml"
    file.write_text("models: [{name: mlp, size: 8}]\nbackends: [eager]\nprecision: bf16\n")
    assert load_suite(str(file)).precisions == ["bf16"]  # the one-value key still reads


def test_the_int8_suite_is_the_default_suite_at_fp32_and_int8():
    default = load_suite(str(ROOT / "examples" / "suite.yaml"))
    int8 = load_suite(str(ROOT / "examples" / "suite-int8.yaml"))
    flagged = load_suite("default", precisions=["fp32", "int8"])
    assert int8.name == "int8" and int8.precisions == ["fp32", "int8"]
    assert [s.digest() for s in int8.specs] == [s.digest() for s in flagged.specs]
    for mine, theirs in zip(int8.specs, default.specs, strict=True):
        assert mine.model_copy(update={"precisions": ["fp32"]}).digest() == theirs.digest()


def test_a_quantized_suite_is_summarized_from_the_store_with_its_flag(tmp_path, capsys):
    from stackcost.measure.stats import summarize as stats_of
    from stackcost.store.database import Store

    suite = load_suite("tiny", precisions=["int8"])
    db = tmp_path / "q.db"
    with Store(db) as store:  # as if measured: int8 halves eager's time, torchscript has none
        for spec in suite.specs:
            run_id = store.create_run(
                spec.model_dump(mode="json"), {}, "stackcost suite tiny", spec.digest(), "fp"
            )
            for cell in spec.cells():
                if cell.backend == "torchscript" and cell.precision == "int8":
                    rep = RepetitionResult(status="unsupported", reason="no int8 path")
                else:
                    ms = 2.0 if cell.precision == "fp32" else 1.0
                    samples = [int(ms * 1e6) + i for i in range(9)]
                    rep = _rep(median_ms=ms)
                    rep.stats, rep.samples_ns = stats_of(samples), samples
                store.add_repetition(store.add_cell(run_id, cell), rep)
            store.finish_run(run_id)
    argv = ["suite", "tiny", "--db", str(db), "--summary-only"]
    assert main([*argv, "--precisions", "fp32,int8"]) == 0
    out = capsys.readouterr().out
    assert "int8 on eager: 2.00× geomean, faster than fp32, over 2 of 2 models" in out
    assert "int8 on torchscript: no geomean, over 0 of 2 models; 2 unsupported: " in out
    # The plain suite is other specs (fp32 alone): none of these runs is its.
    assert main(argv) == 1
    assert "backends and precisions" in capsys.readouterr().err


# -- end to end ---------------------------------------------------------------------------


def _repetitions(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT COUNT(*) FROM repetitions").fetchone()[0]


def test_tiny_suite_end_to_end_resumes_and_summarizes_from_the_store(tmp_path, capsys):
    db = tmp_path / "tiny.db"
    # keep: on a shared machine a disturbed repetition is stored as it is, not waited out.
    argv = ["suite", "tiny", "--db", str(db), "--quiet", "--on-disturbed", "keep"]
    code = main(argv)
    out = capsys.readouterr().out
    with sqlite3.connect(db) as con:
        runs = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        statuses = [r[0] for r in con.execute("SELECT status FROM repetitions")]
    assert runs == 2  # one run per model
    assert len(statuses) == 4  # 2 models x 2 backends x 1 repeat
    assert code == (0 if {"ok", "unstable"} & set(statuses) else 1)
    for label in ("mlp b1 8 px", "mnist-cnn b1 28 px", "geometric means vs eager", "over "):
        assert label in out
    # Again: both runs are resumed and complete, nothing is measured.
    assert main(argv) == code
    assert _repetitions(db) == 4
    again = capsys.readouterr().out
    # --summary-only re-renders the same summary from the store, read-only.
    before = db.stat().st_mtime_ns
    assert main(["suite", "tiny", "--db", str(db), "--summary-only"]) == 0
    summary = capsys.readouterr().out
    assert db.stat().st_mtime_ns == before
    cut = "stored 2 runs"
    assert summary.split("from 2 stored runs")[0] == again.split(cut)[0] == out.split(cut)[0]
    # The report of the suite's stored runs, titled by the suite.
    page = tmp_path / "suite.html"
    assert main(["report", "--suite", "tiny", "--db", str(db), "-o", str(page)]) == 0
    assert "<h2>Suite tiny</h2>" in page.read_text()
    capsys.readouterr()
    assert main(["report", "--suite", "tiny", "r1", "--db", str(db)]) == 2
    assert "give no RUN ids beside it" in capsys.readouterr().err


# A BERT of one thin layer: built and run in milliseconds (tests/zoo/test_hf.py's sizes).
TINY_BERT = (
    "{num_hidden_layers: 1, hidden_size: 16, num_attention_heads: 2, "
    "intermediate_size: 32, vocab_size: 50}"
)


def test_a_suite_with_a_hugging_face_entry_loads_runs_and_is_viewed(tmp_path, capsys):
    pytest.importorskip("transformers")
    file = tmp_path / "suite-hf.yaml"
    file.write_text(  # no size: the model's default, learned where the entry runs
        f"models:\n  - {{name: 'hf:bert', config: {TINY_BERT}}}\n"
        "backends: [eager]\nthreads: 1\n"
        "protocol: {min_time_s: 0.01, min_iters: 3, max_time_s: 0.1, warmup_max_time_s: 0.1}\n"
    )
    config = "num_hidden_layers=1 hidden_size=16 num_attention_heads=2 intermediate_size=32"
    # Loaded without a probe: labelled by the sizes the file gives until it is learned.
    assert load_suite(str(file)).labels() == [f"hf:bert b1 {config} vocab_size=50"]
    db = tmp_path / "hf.db"
    argv = ["suite", str(file), "--db", str(db), "--quiet", "--on-disturbed", "keep"]
    assert main(argv) in (0, 1), capsys.readouterr().err
    out = capsys.readouterr().out
    # The row is the learned workload's (128 tokens), not a second, "missing" one.
    assert "hf:bert b1 128 tokens" in out and "missing" not in out, out
    assert main(["suite", str(file), "--db", str(db), "--summary-only"]) == 0
    summary = capsys.readouterr().out
    assert "hf:bert b1 128 tokens" in summary and "missing" not in summary, summary
    page = tmp_path / "suite.html"
    assert main(["report", "--suite", str(file), "--db", str(db), "-o", str(page)]) == 0
    assert f"hf:bert b1 128 tokens {config}" in page.read_text()
    found = stored_runs(load_suite(str(file), for_viewing=True), db)
    assert found.labels == [f"hf:bert b1 128 tokens {config} vocab_size=50"]
    assert len(found.runs) == 1 and found.missing == []


def test_device_replaces_the_files_and_is_checked():
    assert all(s.devices == ["cpu"] for s in load_suite("tiny").specs)
    cuda = load_suite("tiny", device="cuda", for_viewing=True)
    assert all(s.devices == ["cuda"] for s in cuda.specs)
    with pytest.raises(SpecError, match=r"--device 'gpu' is not a device \(allowed: cpu, cuda\)"):
        load_suite("tiny", device="gpu")
