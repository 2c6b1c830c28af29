"""A checkpoint folder written by `save_pretrained` is a model (issue 41, item 1): loaded
offline with its own weights, recorded by its files' sha256 and config, and refused in one
line when it is not a whole checkpoint."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest
import torch

from stackcost.cli import main
from stackcost.errors import SpecError
from stackcost.runspec.run import model_ref
from stackcost.zoo import ZooError, build_model, workload_of
from tests.test_refusals_edges import refused_and_nothing_stored

transformers = pytest.importorskip("transformers")

# llama-tiny's widths, one layer. ONNX Runtime's model builder is `wrong` at a vocabulary of
# 64 or 128 ids (0.07-0.57 relative error, from a config alone too: hf:llama -c ...), and
# right at 256: a finding about the builder, kept out of this test's way.
TINY = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
)  # fmt: skip


def save_llama(folder: Path, seed: int = 7, **overrides) -> torch.nn.Module:
    """A tiny llama with weights no seed of stackcost's would draw, saved as users do."""
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**TINY, **overrides}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)  # not transformers' init: only loading can reproduce these
    model.save_pretrained(folder)
    return model.eval()


def save_tokenizer(folder: Path) -> None:
    """A BPE tokenizer trained on a line of text, with fewer ids than the model has."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=48, special_tokens=["<unk>", "<s>", "</s>"])
    bpe.train_from_iterator(["a cab ran to a bar and back to the cab"] * 8, trainer)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    ).save_pretrained(folder)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    folder = tmp_path_factory.mktemp("ckpt") / "llama"
    model = save_llama(folder, bos_token_id=1, eos_token_id=2)
    save_tokenizer(folder)
    return folder, model


def test_a_folder_is_a_model_with_its_files_digests_and_config(checkpoint, monkeypatch):
    folder, _ = checkpoint
    monkeypatch.chdir(folder.parent)
    ref = model_ref("hf:./llama")  # relative: the stored name is the absolute folder
    assert ref.name == f"hf:{folder.resolve()}" and ref.checkpoint_path == str(folder.resolve())
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert ref.checkpoint["files"] == {"model.safetensors": digest}
    assert ref.checkpoint["config"]["model_type"] == "llama"
    assert "checkpoint" in ref.key_data()  # another file is another model
    assert "checkpoint" not in model_ref("mlp").key_data()  # other keys are unchanged


def test_it_is_built_with_exactly_its_weights_and_generates(checkpoint):
    folder, saved = checkpoint
    ref = model_ref(f"hf:{folder}")
    workload = workload_of(ref)
    assert workload.domain == "generation" and "its own weights" in workload.description
    assert workload.params["head"] == "causal-lm"
    assert "LlamaForCausalLM (causal-lm)" in workload.description
    model = build_model(ref, workload.sizes, workload)
    got, want = model.state_dict(), saved.state_dict()
    assert list(got) == list(want)
    assert all(torch.equal(got[name], want[name]) for name in want)


def test_flags_that_would_rebuild_the_weights_are_refused(checkpoint):
    folder, _ = checkpoint
    for kw, flag in (({"config": {"num_hidden_layers": 2}}, "-c/--config"),
                     ({"init": "kaiming-normal"}, "--init"), ({"head": "base"}, "--head")):  # fmt: skip
        with pytest.raises(SpecError, match=f"{flag} does not apply to checkpoint"):
            model_ref(f"hf:{folder}", **kw)


def test_hostile_folders_are_refused_in_one_line(tmp_path):
    with pytest.raises(SpecError, match="no such folder"):
        model_ref(f"hf:{tmp_path}/absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match=r"not a checkpoint folder \(no config.json"):
        model_ref(f"hf:{tmp_path}/empty")
    pickled = tmp_path / "pickled"
    save_llama(pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(SpecError, match=r"a pickle \(pytorch_model.bin\), which runs\s+code"):
        model_ref(f"hf:{pickled}")
    cut = tmp_path / "truncated"
    save_llama(cut)
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) - 100])
    with pytest.raises(SpecError, match="model.safetensors is not a whole safetensors file"):
        model_ref(f"hf:{cut}")


def _config_changed(folder: Path, **changes) -> Path:
    """A saved checkpoint whose config.json then had `changes` written over it."""
    save_llama(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return folder


def test_a_config_that_does_not_match_its_weights_is_refused_before_a_cell(tmp_path):
    folder = _config_changed(tmp_path / "mismatch", intermediate_size=96)
    with pytest.raises(ZooError, match="its config does not match its weights: .*mlp"):
        workload_of(model_ref(f"hf:{folder}"))
    deeper = _config_changed(tmp_path / "deeper", num_hidden_layers=2)
    with pytest.raises(ZooError, match="tensors are not in the weights, e.g. layers.1"):
        workload_of(model_ref(f"hf:{deeper}"))


GENAI = ("onnxruntime_genai", "openvino_genai")
GENAI_RUNGS = ("onnxruntime", "openvino")


@pytest.fixture(scope="module")
def generated(checkpoint, tmp_path_factory) -> tuple[int, Path, list[str]]:
    """One generate run of the checkpoint through the CLI: eager, and the GenAI pipelines'
    rungs where both are installed (one run, one probe, for the two tests below)."""
    folder, _ = checkpoint
    db = tmp_path_factory.mktemp("generated") / "g.db"
    genai = all(importlib.util.find_spec(m) is not None for m in GENAI)
    backends = ["eager", *(GENAI_RUNGS if genai else ())]
    code = main(
        ["run", f"hf:{folder}", "--scenario", "generate", "--prompt-len", "8",
         "--new-tokens", "4", "--backends", ",".join(backends), "--threads", "1",
         "--min-time", "0", "--db", str(db), "--quiet"]
    )  # fmt: skip
    return code, db, backends


def test_generate_runs_a_checkpoint_through_the_cli_and_stores_where_it_came_from(generated):
    code, db, backends = generated
    assert code == 0
    with sqlite3.connect(db) as con:
        (spec,) = con.execute("SELECT spec_json FROM runs").fetchone()
        statuses = [s for (s,) in con.execute("SELECT status FROM repetitions")]
    assert statuses == ["ok"] * len(backends)
    (stored,) = json.loads(spec)["models"]
    assert stored["checkpoint"]["files"]["model.safetensors"]
    assert stored["checkpoint"]["config"]["hidden_size"] == 64


def test_the_genai_pipelines_take_the_checkpoints_own_tokenizer(generated):
    for module in GENAI:
        pytest.importorskip(module)
    _, db, _ = generated
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT c.backend, r.status, r.result_json FROM repetitions r"
            " JOIN cells c ON c.id = r.cell_id"
        ).fetchall()
    genai = {backend: (status, result) for backend, status, result in rows if backend != "eager"}
    assert set(genai) == set(GENAI_RUNGS)
    for status, result in genai.values():
        assert status == "ok"
        assert json.loads(result)["details"]["tokenizer"].startswith("the checkpoint's own")


def test_the_cli_refuses_a_broken_checkpoint_and_stores_nothing(tmp_path, capsys):
    (tmp_path / "nothing").mkdir()
    argv = ["run", f"hf:{tmp_path}/nothing", "--scenario", "generate", "--quiet"]
    err = refused_and_nothing_stored(argv, capsys, tmp_path)
    assert "not a checkpoint folder" in err


def test_pickle_weights_load_only_when_trusted(tmp_path):
    folder = tmp_path / "pickled"
    torch.manual_seed(3)
    saved = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)).eval()
    saved.config.architectures = ["LlamaForCausalLM"]  # what save_pretrained records
    saved.config.save_pretrained(folder)  # and the weights as older transformers saved them
    torch.save(saved.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(SpecError, match="or pass --trust-pickle if you trust the file"):
        model_ref(f"hf:{folder}")
    ref = model_ref(f"hf:{folder}", trust_pickle=True)
    assert list(ref.checkpoint["files"]) == ["pytorch_model.bin"] and ref.trust_pickle
    model = build_model(ref, {"prompt_len": 4, "new_tokens": 2}, workload_of(ref))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.state_dict().items())
    with pytest.raises(SpecError, match="--trust-pickle applies to checkpoint folders"):
        model_ref("mlp", trust_pickle=True)
