"""Training any workload with a classification head: Hugging Face models and a user's
token-id model train on inputs drawn as they declare them (tiny configs, a few steps)."""

from __future__ import annotations

import json

import pytest
import torch

from stackcost.cell import Cell, TrainConfig
from stackcost.cli import main
from stackcost.data.splits import Batches, drawn_split, load_splits
from stackcost.runspec.run import model_ref
from stackcost.zoo import workload_of
from tests.scenarios.test_train import repetitions, rows

pytest.importorskip("transformers")

TINY_BERT = ["-c", "num_hidden_layers=2", "-c", "hidden_size=32", "-c", "num_attention_heads=2"]
TINY_BERT += ["-c", "intermediate_size=64", "-c", "vocab_size=100"]
FAST = ["--limit", "64", "--batch-size", "16", "--epochs", "2", "--threads", "1", "--quiet"]


def test_a_tiny_bert_trains_with_its_classification_head(tmp_path) -> None:
    db = tmp_path / "t.db"
    argv = ["train", "hf:bert", *TINY_BERT, "--seq-len", "12", "--backends", "eager,torchscript"]
    assert main([*argv, *FAST, "--lr", "0.01", "--db", str(db)]) == 0
    reps = repetitions(db)
    assert {reps[b]["status"] for b in ("eager", "torchscript")} == {"ok"}
    eager, script = reps["eager"], reps["torchscript"]
    assert eager["weights_digest"] == script["weights_digest"]  # the same start
    data = eager["details"]["data"]
    assert data["dataset"] == "synthetic" and data["train_samples"] == 64
    assert data["inputs"] == {"input_ids": "int64[64, 12]", "attention_mask": "int64[64, 12]"}
    assert script["details"]["variant"] == "trace"  # BERT does not script; the trace trains
    epochs = {
        b: rows(
            db,
            "SELECT e.* FROM epochs e JOIN repetitions r ON e.repetition_id = r.id "
            "WHERE r.id = ? ORDER BY e.epoch",
            reps[b]["id"],
        )
        for b in ("eager", "torchscript")
    }
    for per_epoch in epochs.values():
        assert [e["epoch"] for e in per_epoch] == [1, 2]
        assert all(e["eval_samples"] == 64 and e["eval_accuracy"] is not None for e in per_epoch)
    # The first epoch starts from the same weights on the same batches at both levels;
    # dropout (p=0.1, its own RNG stream per level) differs, so the losses agree roughly.
    first = [per_epoch[0]["train_loss"] for per_epoch in epochs.values()]
    assert abs(first[0] - first[1]) < 0.1 * first[0]
    cell = json.loads(rows(db, "SELECT cell_json FROM cells")[0][0])
    assert cell["sizes"] == {"seq_len": 12} and cell["model"]["head"] == "classification"


def test_a_users_token_model_trains_on_drawn_inputs(tmp_path) -> None:
    db = tmp_path / "t.db"
    argv = ["train", "examples.token_model:WORKLOAD", "--backends", "eager", "--seq-len", "8"]
    assert main([*argv, *FAST, "--db", str(db)]) == 0
    rep = repetitions(db)["eager"]
    assert rep["status"] == "ok"
    assert rep["details"]["data"]["inputs"] == {"tokens": "int64[64, 8]", "mask": "int64[64, 8]"}


def test_drawn_splits_are_valid_seeded_and_differ_between_splits() -> None:
    ref = model_ref("hf:bert", num_classes=3, config={"vocab_size": 100}, head="classification")
    ref = ref.model_copy(update={"config": {"vocab_size": 100}})
    workload = workload_of(ref)
    cell = Cell(model=ref, backend="eager", mode="train", sizes={"seq_len": 6},
                train=TrainConfig(dataset="synthetic", limit=40))  # fmt: skip
    train, again = drawn_split(workload, cell, "train", 40, 3, 0), load_splits(cell, workload, None)
    ids = train.inputs.named()["input_ids"]
    assert ids.dtype == torch.int64 and int(ids.min()) >= 0 and int(ids.max()) < 100
    assert bool((train.inputs.named()["attention_mask"] == 1).all())
    assert set(train.labels.tolist()) <= {0, 1, 2}
    assert torch.equal(ids, again["train"].inputs.named()["input_ids"])  # seeded
    assert not torch.equal(ids, again["test"].inputs.named()["input_ids"])
    x, y = Batches(train, 16, drop_last=True).get(torch.arange(40), 1)
    assert x.names == ("input_ids", "attention_mask") and x.keyword
    assert torch.equal(x.named()["input_ids"], ids[16:32]) and torch.equal(y, train.labels[16:32])
