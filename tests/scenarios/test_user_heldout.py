"""`stackcost heldout hf:./folder --data PATH` (issue 61, item 2): a user's checkpoint scored on
the user's own examples, a classifier by accuracy and agreement, a decoder by perplexity;
the examples made as a deployment feeds them, the calibration share never scored, and
everything given checked before anything is stored."""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stackcost.cli import main
from stackcost.data.user import Corpus, Labelled
from stackcost.errors import SpecError
from stackcost.scenarios.user_heldout import calibration_split, text_examples, text_windows
from tests.test_refusals_edges import refused_and_nothing_stored

transformers = pytest.importorskip("transformers")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "text_classifier.py"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    """The example's classifier, trained briefly: a BERT folder, train.csv and test.csv."""
    out = tmp_path_factory.mktemp("clf")
    subprocess.run(
        [sys.executable, str(EXAMPLE), str(out), "--epochs", "1", "--per-class", "30"],
        check=True, capture_output=True,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> Path:
    """A GPT-2 saved with its own byte-level BPE tokenizer, and some text."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = tmp_path_factory.mktemp("gpt2")
    text = Path(csv.__file__).read_text(encoding="utf-8")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    bpe.train_from_iterator([text], trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=320, n_embd=32, n_layer=1, n_head=2, n_positions=64, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    transformers.GPT2LMHeadModel(config).save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    (out / "text.txt").write_text(text[:6000], encoding="utf-8")
    return out


# -- how examples are made ------------------------------------------------------------------


def test_text_becomes_windows_as_llama_perplexity_reads_a_file(decoder):
    tokenizer = transformers.AutoTokenizer.from_pretrained(decoder / "model")
    corpus = Corpus(("ab cd ab", "cd ab"), "two documents")
    stream = (
        tokenizer("ab cd ab", add_special_tokens=False)["input_ids"]
        + [tokenizer.eos_token_id]
        + tokenizer("cd ab", add_special_tokens=False)["input_ids"]
    )
    windows = text_windows(corpus, tokenizer, 2, None)
    assert windows.half == 1 and windows.ids.shape == ((len(stream) - 1) // 2, 2)
    assert windows.ids[0].tolist() == stream[:2] and windows.labels[0].tolist() == stream[1:3]
    assert windows.ids[1].tolist() == stream[2:4]  # stride: the context
    assert "joined by its end-of-text id" in windows.record["how"]
    with pytest.raises(SpecError, match="fewer than one window of 65"):
        text_windows(corpus, tokenizer, 64, None)


def test_labelled_text_is_padded_to_the_longest_with_a_mask(classifier):
    tokenizer = transformers.AutoTokenizer.from_pretrained(classifier / "model")
    labelled = Labelled(np.array([0, 1]), texts=("import os", "a much longer line of text"))
    made = text_examples(labelled, tokenizer, 64, True, "d.csv")
    ids, mask = made.inputs.tensors
    assert made.inputs.names == ("input_ids", "attention_mask")
    assert ids.shape == mask.shape and mask[0].sum() < mask[1].sum() == ids.shape[1]
    assert (ids[0][mask[0] == 0] == tokenizer.pad_token_id).all()
    assert "padded on the right to the longest" in made.how
    with pytest.raises(SpecError, match="example 2 is .* tokens long, more than the model's 5"):
        text_examples(labelled, tokenizer, 5, True, "d.csv")
    pairs = Labelled(np.array([0]), texts=("import os",), pairs=("import sys",))
    made = text_examples(pairs, tokenizer, 64, True, "d.csv")
    types = made.inputs.named()["token_type_ids"]
    assert types.max() == 1  # the second text is its own segment


def test_the_calibration_share_is_drawn_once_and_never_scored():
    calibrate, score = calibration_split(100, 0.2)
    assert len(calibrate) == 20 and len(score) == 80 and not set(calibrate) & set(score)
    again, _ = calibration_split(100, 0.2)
    assert (again == calibrate).all()
    assert [len(part) for part in calibration_split(2, 0.01)] == [1, 1]


# -- end to end ---------------------------------------------------------------------------


def _rows(db: Path) -> list[dict]:
    with sqlite3.connect(db) as con:
        return [json.loads(r) for (r,) in con.execute("SELECT record_json FROM heldout")]


def test_a_fine_tuned_classifier_is_scored_on_its_own_test_split(classifier, tmp_path, capsys):
    db, out = tmp_path / "h.db", tmp_path / "rows.json"
    code = main(
        ["heldout", f"hf:{classifier / 'model'}", "--data", str(classifier / "test.csv"),
         "--backends", "eager,onnxruntime,openvino", "--precision", "fp32,int8-dyn,int8,w8",
         "--batch-size", "16", "--threads", "1", "--db", str(db), "-o", str(out), "--quiet"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    rows = {(r["backend"], r["precision"]): r for r in _rows(db)}
    assert code in (0, 1) and len(rows) == 12, rows.keys()
    total = len(list(csv.reader((classifier / "test.csv").open()))) - 1
    calibrated = round(total * 0.2)
    for key, row in rows.items():
        assert row["status"] in ("ok", "wrong", "undecided", "unsupported"), (key, row)
        if row["status"] != "unsupported":
            assert row["samples"] == total - calibrated  # the share is never scored
            assert row["top1_low"] is not None and row["drop_high_pt"] is not None
    for rung in ("onnxruntime", "openvino"):  # the same function: it decides as eager does
        assert rows[rung, "fp32"]["status"] == "ok" and rows[rung, "fp32"]["top1"] >= 0.99
    with sqlite3.connect(db) as con:
        (spec,) = con.execute("SELECT spec_json FROM runs").fetchone()
    assert json.loads(spec)["data"]["calibration"].startswith(f"{calibrated} of the {total}")
    written = json.loads(out.read_text())
    assert written["how"].startswith(f"{total} texts tokenized by the checkpoint's tokenizer")
    assert f"{calibrated} of the {total} examples of --data (20%" in written["calibration"]
    assert "int8 calibration" in " ".join(printed.split())  # the caption, however wrapped


def test_a_decoder_is_scored_on_a_text_file_on_every_generating_rung(decoder, tmp_path):
    db = tmp_path / "h.db"
    code = main(
        ["heldout", f"hf:{decoder / 'model'}", "--data", str(decoder / "text.txt"),
         "--backends", "eager,openvino", "--precision", "fp32,w8", "--prompt-len", "32",
         "--threads", "1", "--db", str(db), "--quiet"]
    )  # fmt: skip
    rows = {(r["backend"], r["precision"]): r for r in _rows(db)}
    assert code == 0 and set(rows) == {
        (b, p) for b in ("eager", "openvino") for p in ("fp32", "w8")
    }
    for row in rows.values():
        assert row["status"] == "ok" and row["windows"] > 10 and row["perplexity"] > 1
        assert (
            row["ppl_increase_low_pct"] <= row["ppl_increase_pct"] <= row["ppl_increase_high_pct"]
        )


# -- refusals: one line, exit 2, nothing stored ----------------------------------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ([], "give --data"),
        (["--data", "{d}/test.csv", "--epochs", "2"], "--epochs does not apply to checkpoint"),
        (["--data", "{d}/missing.csv"], "does not exist"),
        (["--data", "{d}"], "a text classifier takes .csv or .jsonl"),
        (["--data", "{d}/bad.csv"], "label 'cat' is not one of the model's labels"),
        (["--data", "{d}/long.csv"], "more than the model's 256"),
        (["--data", "{d}/test.csv", "--calibration-share", "1.5"], "a fraction between 0 and 1"),
        (["--data", "{d}/test.csv", "--prompt-len", "8"], "--prompt-len applies to a causal LM"),
    ],
)
def test_a_classifier_refuses_bad_data_in_one_line(classifier, tmp_path, capsys, extra, needle):
    (classifier / "bad.csv").write_text("text,label\nimport os,cat\n")
    (classifier / "long.csv").write_text("text,label\n" + "x " * 400 + ",email\n")
    argv = ["heldout", f"hf:{classifier / 'model'}", *(a.format(d=classifier) for a in extra)]
    err = refused_and_nothing_stored(argv, capsys, tmp_path)
    assert needle in err, err


def test_a_folder_without_a_head_heldout_scores_is_refused(tmp_path, capsys, decoder):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    base = tmp_path / "base"
    transformers.BertModel(
        transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=32)
    ).save_pretrained(base)  # fmt: skip
    capsys.readouterr()  # save_pretrained's progress bar
    argv = ["heldout", f"hf:{base}", "--data", str(decoder / "text.txt")]
    err = refused_and_nothing_stored(argv, capsys, tmp_path)
    assert "is a base model (BertModel); heldout scores causal-lm on text" in err, err
    no_tokenizer = tmp_path / "bare"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1,
                                 n_head=2)).save_pretrained(no_tokenizer)  # fmt: skip
    capsys.readouterr()
    argv = ["heldout", f"hf:{no_tokenizer}", "--data", str(decoder / "text.txt")]
    err = refused_and_nothing_stored(argv, capsys, tmp_path)
    assert "its tokenizer does not load" in err and "tokenizer.save_pretrained" in err, err


def test_an_image_classifier_is_scored_on_an_image_folder(tmp_path):
    """A ViT saved with its id2label and preprocessor_config.json, scored on a folder of
    one subfolder per class: resized and normalized as its processor says."""
    import torch
    from PIL import Image

    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, num_labels=2, id2label={0: "cat", 1: "dog"},
        label2id={"cat": 0, "dog": 1},
    )  # fmt: skip
    folder = tmp_path / "vit"
    transformers.ViTForImageClassification(config).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(
        json.dumps({"image_mean": [0.4, 0.5, 0.6], "image_std": [0.2, 0.25, 0.3]})
    )
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(6):
            pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / label / f"{i}.png")
    db, out = tmp_path / "h.db", tmp_path / "rows.json"
    code = main(
        ["heldout", f"hf:{folder}", "--data", str(tmp_path / "images"), "--backends",
         "eager,onnxruntime", "--precision", "fp32", "--batch-size", "4", "--threads", "1",
         "--db", str(db), "-o", str(out), "--quiet"]
    )  # fmt: skip
    rows = {(r["backend"], r["precision"]): r for r in _rows(db)}
    assert code == 0 and set(rows) == {("eager", "fp32"), ("onnxruntime", "fp32")}
    assert all(r["status"] == "ok" and r["samples"] == 12 for r in rows.values())
    how = json.loads(out.read_text())["how"]
    assert "resized to 32x32" in how and "preprocessor_config.json" in how
