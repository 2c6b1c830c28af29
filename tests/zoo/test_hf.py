"""The Hugging Face adapter (zoo/hf.py) on tiny configs: a forward pass takes milliseconds."""

from __future__ import annotations

import pytest
import torch

from stackcost.cell import ModelRef
from stackcost.execute.probe import _answer
from stackcost.workload import make_example
from stackcost.zoo import MODELS, ZooError, build_model, weights_digest, workload_of

pytest.importorskip("transformers")

TINY_BERT = {
    "num_hidden_layers": 2,
    "hidden_size": 32,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}
TINY = {
    "hf:bert": {**TINY_BERT, "vocab_size": 100},
    "hf:gpt2": {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 100},
    "hf:t5": {"d_model": 32, "d_ff": 64, "d_kv": 16, "num_layers": 2, "num_heads": 2,
              "vocab_size": 100},
    "hf:vit": {**TINY_BERT, "image_size": 32, "patch_size": 8},
    "hf:wav2vec2": {**TINY_BERT, "conv_dim": 8, "num_conv_pos_embeddings": 16,
                    "num_conv_pos_embedding_groups": 2},
}  # fmt: skip
# Small sizes per modality (wav2vec2's feature extractor needs 400 samples for one frame).
SIZES = {"seq_len": 12, "resolution": 32, "samples": 800}


def ref(name: str, **kw: object) -> ModelRef:
    kw.setdefault("num_classes", 0)
    return ModelRef(name=name, config=TINY[name], **kw)


def sizes_of(workload) -> dict[str, int]:
    return {axis: SIZES[axis] for axis in workload.axes}


@pytest.mark.parametrize(
    ("name", "inputs", "sizes", "minimum", "maximum", "domain"),
    [
        ("hf:bert", ["input_ids", "attention_mask"], {"seq_len": 128}, {}, {"seq_len": 512},
         "nlp"),
        ("hf:gpt2", ["input_ids", "attention_mask"], {"seq_len": 128}, {}, {"seq_len": 1024},
         "decoder"),
        ("hf:t5", ["input_ids", "attention_mask", "decoder_input_ids"], {"seq_len": 128}, {},
         {}, "seq2seq"),
        ("hf:vit", ["pixel_values"], {"resolution": 32}, {"resolution": 8}, {},
         "vision-transformer"),
        ("hf:wav2vec2", ["input_values"], {"samples": 16000}, {"samples": 400}, {}, "speech"),
    ],
)  # fmt: skip
def test_workload_facts_per_modality(name, inputs, sizes, minimum, maximum, domain) -> None:
    w = workload_of(ref(name))
    assert [i.name for i in w.inputs] == inputs
    assert (w.sizes, w.minimum, w.maximum, w.domain) == (sizes, minimum, maximum, domain)
    assert w.keyword and w.num_classes == 0 and w.builder == "stackcost.zoo.hf:build"
    assert w.params == {"model_type": name.removeprefix("hf:"), "config": {}}
    assert "_init_weights" in w.description
    scale = "initializer_factor 1" if name == "hf:t5" else "initializer_range 0.02"
    assert scale in w.description
    for i in w.inputs:
        if i.kind == "ids":
            assert (i.dtype, i.high, i.shape) == ("int64", 100, ("batch", "seq_len"))
    if name == "hf:vit":
        assert w.inputs[0].shape == ("batch", 3, "resolution", "resolution")
        assert w.in_channels == 3
    assert workload_of(ref(name)).facts() == w.facts()  # plain data, the same each time


def test_audio_minimum_is_the_feature_extractors_receptive_field() -> None:
    config = {"conv_dim": "8,8", "conv_kernel": "10,3", "conv_stride": "5,2"}
    w = workload_of(ModelRef(name="hf:wav2vec2", config=config))
    assert w.minimum == {"samples": 10 + (3 - 1) * 5}
    # One number for a list field is every element of the type's default list.
    w = workload_of(ModelRef(name="hf:wav2vec2", config={"conv_dim": 8}))
    assert w.minimum == {"samples": 400}


@pytest.mark.parametrize("name", list(TINY))
def test_build_is_deterministic_and_inputs_are_valid(name: str) -> None:
    r = ref(name)
    w = workload_of(r)
    sizes = sizes_of(w)
    a, b = build_model(r, sizes, w), build_model(r, sizes, w)
    assert not a.training
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert weights_digest(build_model(r.model_copy(update={"seed": 1}), sizes, w)) != (
        weights_digest(a)
    )
    example = make_example(w, r, 2, sizes)
    for spec, t in zip(w.inputs, example.tensors, strict=True):
        if spec.kind == "ids":
            assert t.dtype == torch.int64 and int(t.min()) >= 0 and int(t.max()) < spec.high
        elif spec.kind == "mask":
            assert t.dtype == torch.int64 and bool((t == 1).all())
    assert example.record() == {
        n: f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
        for n, t in example.named().items()
    }
    with torch.inference_mode():
        out = example.call(a)
    hidden = out["last_hidden_state"]
    assert hidden.shape[0] == 2 and hidden.shape[-1] == 32 and torch.isfinite(hidden).all()
    if "seq_len" in sizes:
        assert hidden.shape[1] == sizes["seq_len"]


@pytest.mark.parametrize("name", ["hf:bert", "hf:gpt2", "hf:vit", "hf:wav2vec2"])
def test_classification_head_gives_logits(name: str) -> None:
    r = ref(name, head="classification", num_classes=3)
    w = workload_of(r)
    assert w.num_classes == 3
    model = build_model(r, sizes_of(w), w)
    example = make_example(w, r, 2, sizes_of(w))
    with torch.inference_mode():
        out = example.call(model)
    assert list(out.keys()) == ["logits"] and out["logits"].shape == (2, 3)
    # Without --num-classes the head is binary.
    assert workload_of(ref(name, head="classification")).num_classes == 2


def test_vit_image_size_follows_the_resolution() -> None:
    r = ref("hf:vit")
    w = workload_of(r)
    model = build_model(r, {"resolution": 48}, w)
    assert model.config.image_size == 48
    example = make_example(w, r, 1, {"resolution": 48})
    with torch.inference_mode():
        assert example.call(model)["last_hidden_state"].shape == (1, 36 + 1, 32)
    assert w.size_problem("resolution", 4) == (
        "resolution 4 is too small for hf:vit (minimum 8 px)"
    )


def test_zoo_entries_keep_the_registry_unless_overridden() -> None:
    for name in ("bert-base", "gpt2", "t5-small", "vit-b16", "wav2vec2-base"):
        assert workload_of(ModelRef(name=name, num_classes=0)) is MODELS[name]
    # With -c: the adapter, under the entry's name, sizes and domain.
    w = workload_of(ModelRef(name="gpt2", num_classes=0, config={"n_positions": 64}))
    assert (w.name, w.domain, w.maximum) == ("gpt2", "decoder", {"seq_len": 64})
    assert w.sizes == {"seq_len": 64}  # the entry's 128 is clipped to what the config allows
    assert w.params == MODELS["gpt2"].params
    assert "124M" not in w.description and w.description.startswith("GPT-2 small decoder")
    w = workload_of(ModelRef(name="vit-b16", num_classes=0, config={"image_size": 64}))
    assert w.sizes == {"resolution": 64} and w.minimum == {"resolution": 16}
    w = workload_of(ModelRef(name="bert-base", num_classes=0, head="classification"))
    assert (w.num_classes, w.sizes, w.maximum) == (2, {"seq_len": 128}, {"seq_len": 512})
    assert w.facts()["inputs"] == MODELS["bert-base"].facts()["inputs"]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (ModelRef(name="hf:bertt"),
         "unknown Hugging Face model type 'bertt' (did you mean bert? e.g. bert, gpt2, t5, "
         "vit, wav2vec2)"),
        (ModelRef(name="hf:bert", config={"num_layerz": 2}),
         "hf:bert has no config field 'num_layerz' (did you mean num_hidden_layers?)"),
        (ModelRef(name="bert-base", config={"n_layer": 2}),
         "bert-base (hf:bert) has no config field 'n_layer'"),
        (ModelRef(name="hf:gpt2", config={"use_cache": True}),
         "hf:gpt2: -c use_cache is not allowed (stackcost sets use_cache=false"),
        (ModelRef(name="hf:bert", config={"num_labels": 3}), "give the head's width with"),
        (ModelRef(name="hf:bert", config={"hidden_size": "big"}),
         "hf:bert: config rejected: "),
        (ModelRef(name="hf:wav2vec2", config={"conv_dim": "8,x"}),
         "give numbers separated by commas"),
        (ModelRef(name="hf:t5", head="classification"), "pools at <eos> tokens"),
    ],
)  # fmt: skip
def test_bad_type_or_config_is_one_line(model: ModelRef, message: str) -> None:
    with pytest.raises(ZooError) as info:
        workload_of(model)
    text = str(info.value)
    assert message in text and "\n" not in text
    # The probe child hands the same line back to the CLI.
    assert _answer({"models": [model.model_dump(mode="json")], "backends": {}}) == {"error": text}


def test_t5_onnx_export_falls_back_to_legacy_only_when_the_exporter_was_not_chosen(
    tmp_path,
) -> None:
    """torch 2.13's dynamo exporter cannot decompose T5's attention; with the exporter left
    to its default the graph comes from the legacy exporter and the record says why, and
    the exported graph gives eager's outputs. A chosen exporter is never swapped."""
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    from stackcost.backends.onnx_export import export_onnx

    # One layer each side: the attention the dynamo exporter cannot decompose is in each,
    # and every further layer adds seconds to both exports.
    r = ref("hf:t5").model_copy(update={"config": {**TINY["hf:t5"], "num_layers": 1}})
    w = workload_of(r)
    model, example = build_model(r, sizes_of(w), w), make_example(w, r, 2, sizes_of(w))
    assert model.config.num_layers == model.config.num_decoder_layers == 1
    with pytest.raises(Exception, match="decompose"):
        export_onnx(model, example, tmp_path / "chosen" / "m.onnx", "dynamo")
    path = tmp_path / "default" / "m.onnx"
    details = export_onnx(model, example, path, "dynamo", fallback=True)
    assert details["exporter"] == "legacy"
    assert details["exporter_fallback"].startswith("dynamo failed (")
    assert "\n" not in details["exporter_fallback"]
    assert details["onnx_outputs"] == ["last_hidden_state", "encoder_last_hidden_state"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: t.numpy() for n, t in example.named().items()})
    with torch.inference_mode():
        want = example.call(model)
    assert abs(got[0] - want["last_hidden_state"].numpy()).max() < 1e-4
