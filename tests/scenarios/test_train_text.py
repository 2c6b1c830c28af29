"""A decoder learns Python's standard library: next-token loss per position, held-out
files scored each epoch, and the eager rung's weights kept as a checkpoint folder that
`stackcost run hf:DIR` loads with its own tokenizer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from stackcost import zoo
from stackcost.cell import Cell, TrainConfig
from stackcost.cli import main
from stackcost.data.splits import load_splits
from stackcost.runspec.run import model_ref
from stackcost.scenarios.train import cross_entropy
from stackcost.store.database import Store
from stackcost.store.heldout import key, latest
from tests.scenarios.test_train import repetitions, rows

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

VOCAB = 512
TINY = ["-c", f"vocab_size={VOCAB}", "--prompt-len", "32", "--limit", "256", "--batch-size", "16"]
TINY += ["--epochs", "3", "--optimizer", "adam", "--lr", "0.003", "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    home = tmp_path_factory.mktemp("lm")
    db, keep = home / "t.db", home / "kept"
    argv = ["train", "llama-tiny", *TINY, "--backends", "eager", "--keep-weights", str(keep)]
    return main([*argv, "--db", str(db)]), db, keep


def test_a_decoder_learns_held_out_text_better_than_chance(trained):
    code, db, _ = trained
    assert code == 0
    rep = repetitions(db)["eager"]
    assert rep["status"] in ("ok", "disturbed"), rep["reason"]  # a busy neighbour: still data
    epochs = rows(
        db,
        "SELECT e.* FROM epochs e WHERE e.repetition_id = ? ORDER BY e.epoch",
        rep["id"],
    )
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    held_out = [e["eval_loss"] for e in epochs]  # nats per token
    assert held_out == sorted(held_out, reverse=True) and held_out[-1] < math.log(VOCAB) - 0.5
    assert all(0 < e["train_accuracy"] < 1 and e["train_samples"] == 256 for e in epochs)
    data = rep["details"]["data"]
    assert data["dataset"] == "stdlib-text" and data["test_samples"] == 256
    train, test = data["text"]["train"], data["text"]["test"]
    assert train["context"] == 32 and train["vocab_size"] == VOCAB
    assert train["tokens"] == 256 * 32 and train["digest"] != test["digest"]
    cell = json.loads(rows(db, "SELECT cell_json FROM cells")[0][0])
    assert cell["sizes"] == {"prompt_len": 32} and cell["model"]["head"] == "causal-lm"


def test_the_kept_checkpoint_scores_what_the_last_epoch_recorded(trained):
    _, db, keep = trained
    folder = _checkpoint(keep)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in folder.iterdir()
    }
    ref = model_ref(f"hf:{folder}")
    model = zoo.build_model(ref, {"prompt_len": 32})
    cell = Cell(
        model=model_ref("llama-tiny", config={"vocab_size": VOCAB}, head="causal-lm"),
        backend="eager",
        sizes={"prompt_len": 32},
        train=TrainConfig(dataset="stdlib-text", limit=256),
    )
    test = load_splits(cell, zoo.workload_of(cell.model), None)["test"]
    with torch.no_grad():
        logits = test.inputs.call(model)["logits"]
    loss = cross_entropy(logits, test.labels).item()
    rep = repetitions(db)["eager"]
    (last,) = rows(
        db, "SELECT eval_loss FROM epochs WHERE repetition_id = ? AND epoch = 3", rep["id"]
    )
    assert loss == pytest.approx(last["eval_loss"], rel=1e-4)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["llama-tiny"], "-c vocab_size=2048"),
        (["llama-tiny", "-c", "vocab_size=512", "--backends", "onnxruntime"], "classifiers"),
        (["mlp", "--dataset", "stdlib-text"], "has no LM head"),
        (["llama-tiny", "-c", "vocab_size=512", "--new-tokens", "4"], "--prompt-len"),
        (
            [
                "llama-tiny",
                "-c",
                "vocab_size=512",
                "--head",
                "classification",
                "--dataset",
                "stdlib-text",
            ],
            "causal LM",
        ),
    ],
)
def test_text_training_refuses_what_it_cannot_do(tmp_path, capsys, argv, expected):
    db = tmp_path / "t.db"
    assert main(["train", *argv, "--db", str(db), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
    assert not db.exists()


def _text_cell() -> Cell:
    return Cell(
        model=model_ref("llama-tiny", config={"vocab_size": VOCAB}, head="causal-lm"),
        backend="eager",
        sizes={"prompt_len": 32},
        threads=1,
        train=TrainConfig(dataset="stdlib-text", limit=256),
    )


def _checkpoint(keep: Path) -> Path:
    (folder,) = [p for p in keep.glob("*/checkpoint") if p.is_dir()]
    return folder


def test_held_out_text_scores_each_rung_against_eager_fp32(trained, tmp_path):
    _, db, keep = trained
    # Eager's generator is the Generator contract every rung keeps; the other rungs' rows
    # are the table in docs/results.md (an ONNX Runtime build here would cost the suite 10 s more).
    recipe = [a if a != "--batch-size" else "--train-batch-size" for a in TINY]
    argv = ["heldout", "llama-tiny", *recipe, "--backends", "eager", "--precision", "fp32,w8"]
    out = tmp_path / "h.json"
    argv += ["--batch-size", "32", "--weights-dir", str(keep), "--db", str(db), "-o", str(out)]
    assert main(argv) == 0
    by = {(r["backend"], r["precision"]): r for r in json.loads(out.read_text())["rows"]}
    reference = by["eager", "fp32"]
    assert reference["status"] == "ok" and reference["tokens"] == 256 * 17  # 16 + 1 a window
    assert reference["kl_mean"] < 1e-9 and reference["same_top"] == 1.0
    assert 1 < reference["perplexity"] < VOCAB
    for (backend, precision), row in by.items():
        assert row["status"] == "ok", (backend, precision, row["reason"])
        assert row["weight_bytes"] and row["kl_p99"] >= row["kl_mean"] >= 0
        if precision == "fp32":
            assert abs(row["ppl_increase_pct"]) < 0.1 and row["same_top"] > 0.999
        else:  # rounding the weights costs something, within w8's rule
            assert row["kl_mean"] > 0 and row["ppl_increase_pct"] < 1.0
            assert row["weight_bytes"] < reference["weight_bytes"]
    # Stored under the checkpoint's own name and files: what its timing cells carry.
    ref = model_ref(f"hf:{_checkpoint(keep)}")
    with Store(db, read_only=True) as store:
        found = latest(store, {ref.name})
    w8 = found[key(ref, "eager", "w8")]
    assert w8.metric == "ppl_increase_pct" and w8.value == by["eager", "w8"]["ppl_increase_pct"]
    assert len(found) == 2


def test_a_quantization_broken_on_purpose_fails_the_held_out_rule(trained, tmp_path, monkeypatch):
    from stackcost.generation.eager import EagerGenerator
    from stackcost.scenarios.decoder_heldout import evaluate

    _, _, keep = trained
    monkeypatch.setattr(EagerGenerator, "quantize_scale_error", 10.0)
    ref = model_ref(f"hf:{_checkpoint(keep)}")
    rows = evaluate(_text_cell(), ref, ["eager"], ["w8"], 32, tmp_path)
    (broken,) = rows
    assert broken.status == "wrong" and "perplexity +" in broken.reason, broken
    assert broken.ppl_increase_pct > 1.0


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-c", f"vocab_size={VOCAB}", "--precision", "int8"], "allowed: fp32, w8, w4"),
        ([], "-c vocab_size=2048"),
        (["-c", f"vocab_size={VOCAB}", "--backends", "eager,tf"], "tf"),
        (["-c", f"vocab_size={VOCAB}", "--option", "llama.cpp.w4_type=Q5"], "Q4_0, Q4_K_M"),
        (
            [
                "-c",
                f"vocab_size={VOCAB}",
                "--backends",
                "eager",
                "--option",
                "llama.cpp.w4_type=Q4_0",
            ],
            "not being scored",
        ),
        (["-c", f"vocab_size={VOCAB}", "--option", "eager"], "backend.key=value"),
    ],
)
def test_heldout_on_a_decoder_refuses_in_one_line(tmp_path, capsys, argv, expected):
    db = tmp_path / "h.db"
    code = main(["heldout", "llama-tiny", *argv, "--db", str(db), "--weights-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and expected in err, err
    assert not db.exists() and not any(tmp_path.iterdir())
