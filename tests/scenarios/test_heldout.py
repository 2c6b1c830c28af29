"""stackcost heldout: trained weights kept by recipe, held-out accuracy per rung and precision.

Tiny on purpose (mlp on digits, --limit, 3 epochs, one thread, eager and onnxruntime): the
file stays within seconds of training and ONNX export on 2 cores.
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from stackcost.backends.eager import EagerBackend
from stackcost.cli import main
from stackcost.scenarios.heldout import _Answer, judge
from stackcost.store.database import Store

TINY = ["--limit", "256", "--epochs", "3", "--lr", "0.1", "--threads", "1", "--quiet"]


class BrokenEager(EagerBackend):
    """Eager whose quantization multiplies every weight scale by 10: a broken int8."""

    quantize_scale_error = 10.0


BROKEN = f"{__name__}:BrokenEager"


def heldout(tmp, out: str, *argv: str) -> int:
    return main(
        ["heldout", "mlp", *TINY, *argv, "--weights-dir", str(tmp / "weights")]
        + ["--db", str(tmp / "h.db"), "-o", str(tmp / out)]
    )


def train_runs(db) -> int:
    with Store(db, read_only=True) as store:
        return len(store.run_ids())  # the measured runs: held-out ones are not


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("heldout")
    # 48 does not divide the 256 test samples: the last batch is padded.
    argv = ["--backends", "eager,onnxruntime", "--precision", "fp32,int8", "--batch-size", "48"]
    code = heldout(tmp, "first.json", *argv)
    return tmp, code, json.loads((tmp / "first.json").read_text())["rows"]


def test_held_out_accuracies_are_numbers(evaluated):
    tmp, code, rows = evaluated
    assert code == 0, rows
    got = {(r["backend"], r["precision"]): r for r in rows}
    assert got["eager", "int8"]["status"] == "unsupported"  # torchao's int8 is PT2E
    # 256 samples cannot show 99% agreement even with no flip (the interval reaches 98.8%):
    # a row meeting its rule as observed is ok, and its reason says so.
    assert "at n=256" in got["onnxruntime", "fp32"]["reason"]
    for key in (("eager", "fp32"), ("onnxruntime", "fp32"), ("onnxruntime", "int8")):
        r = got[key]
        assert r["status"] == "ok", r
        assert r["samples"] == 256  # padded rows dropped
        assert r["top1_low"] <= r["top1"] <= r["top1_high"]
        assert 0.3 < r["accuracy"] <= 1.0  # 3 epochs of 256 samples learn something
        assert r["drop_pt"] == pytest.approx((r["fp32_accuracy"] - r["accuracy"]) * 100)
    assert got["onnxruntime", "fp32"]["top1"] == 1.0
    # Stored with a run of their own, under the name timing cells of mlp carry.
    con = sqlite3.connect(tmp / "h.db")
    stored = con.execute("SELECT model, backend, precision, status, metric, value FROM heldout")
    assert sorted(stored) == sorted(
        ("mlp", r["backend"], r["precision"], r["status"], "accuracy_drop_pt", r["drop_pt"])
        for r in rows
    )


def test_weights_are_kept_by_recipe_and_reused(evaluated, capsys):
    tmp, _, rows = evaluated
    kept = list((tmp / "weights").glob("*/weights.pt"))
    assert len(kept) == 1
    assert train_runs(tmp / "h.db") == 1
    capsys.readouterr()
    assert heldout(tmp, "again.json", "--backends", "eager", "--precision", "fp32") == 0
    assert "kept for this recipe" in capsys.readouterr().err
    assert train_runs(tmp / "h.db") == 1  # not trained again
    again = json.loads((tmp / "again.json").read_text())["rows"]
    assert again[0]["accuracy"] == rows[0]["accuracy"]
    # Another recipe (two epochs) is trained and kept beside the first.
    assert (
        heldout(tmp, "other.json", "--backends", "eager", "--precision", "fp32", "--epochs", "2")
        == 0
    )
    assert len(list((tmp / "weights").glob("*/weights.pt"))) == 2


def test_a_broken_quantization_comes_out_wrong(evaluated):
    tmp, _, _ = evaluated
    # w8, not int8-dyn: under ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with VNNI, torch._int_mm
    # still takes oneDNN's int8 path, whose AVX2 kernel saturates, so eager int8-dyn is
    # honestly wrong there too. Weight-only int8 has no int8 dot product on any ISA.
    code = heldout(tmp, "broken.json", "--backends", f"eager,{BROKEN}", "--precision", "w8")
    rows = {r["backend"]: r for r in json.loads((tmp / "broken.json").read_text())["rows"]}
    assert code == 1
    assert rows["eager"]["status"] == "ok", rows["eager"]
    assert rows[BROKEN]["status"] == "wrong", rows[BROKEN]
    assert "top-1 agreement" in rows[BROKEN]["reason"] or "drop" in rows[BROKEN]["reason"]


def test_the_rule_judges_agreement_and_drop():
    labels = np.array([0, 1, 2, 3] * 100)
    ref = labels.copy()
    worse = labels.copy()
    worse[:20] = (worse[:20] + 1) % 4  # 95% agreement, 5 points lost: both intervals outside
    answers = [
        _Answer("eager", "fp32", ref),
        _Answer("onnxruntime", "fp32", ref),
        _Answer("onnxruntime", "w4", worse),
        _Answer("openvino", "fp32", status="failed", reason="RuntimeError: boom"),
        _Answer("openvino", "int8", ref),
    ]
    got = {(h.backend, h.precision): h for h in judge(answers, labels)}
    assert got["onnxruntime", "fp32"].status == "ok"
    w4 = got["onnxruntime", "w4"]
    assert (w4.status, w4.accuracy, w4.top1) == ("wrong", 0.95, 0.95)
    assert w4.drop_pt == pytest.approx(5.0) and "drop 5.0 pt" in w4.reason
    assert got["openvino", "fp32"].status == "failed"
    # Its rung's fp32 failed: the drop is against eager fp32's accuracy.
    assert got["openvino", "int8"].fp32_accuracy == 1.0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--precision", "int9"], "unknown precision 'int9' (allowed: fp32, int8-dyn"),
        (["--backends", "nope"], "unknown backend 'nope'"),
        (["--batch-size", "0"], "batch size"),
        (["--batch-size", "512"], "--batch-size 512 is more than the 256 training samples"),
        (["-o", "out.csv"], "write a .json or .md file"),
        (["--option", "onnxruntime.opt_level=all"], "--option applies to a decoder's rungs"),
        (["--db", "/nonexistent/h.db"], "--db: database directory"),
    ],
)
def test_bad_input_exits_2(tmp_path, capsys, argv, needle):
    code = main(["heldout", "mlp", *TINY, "--weights-dir", str(tmp_path / "w"), *argv])
    assert code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


def test_keep_weights_needs_the_eager_rung(tmp_path, capsys):
    code = main(
        ["train", "mlp", "--backends", "torchscript", "--keep-weights", str(tmp_path)]
        + ["--db", str(tmp_path / "t.db"), "--limit", "256", "--quiet"]
    )
    assert code == 2
    assert "add eager to --backends" in capsys.readouterr().err
