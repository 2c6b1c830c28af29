"""onnxruntime-genai's rung (model builder + og.Generator): teacher-forced logits against
eager fp32, greedy generation's shape and clock readings, and the weight-only precisions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.generation.conftest import (
    TINY,
    fixed_ids,
    prepared_with,
    reference_logits,
    relative_error,
)

pytest.importorskip("onnxruntime_genai")

PROMPT, NEW = 8, 4
EOS = 2  # LlamaConfig's default, which the builder copies into genai_config.json
# Observed (tiny llama, 2-vCPU EPYC, accuracy level 4): fp32 3e-7, w8 9.7e-3, w4 0.13 (b1);
# groups of 32 over a hidden size of 64 leave w4 coarse.
BOUNDS = {"fp32": 1e-3, "w8": 2e-2, "w4": 0.3}


@pytest.fixture
def prepared(make_decoder, cache):
    from stackcost.generation.onnxruntime import OrtGenAIGenerator

    return prepared_with(make_decoder, cache, OrtGenAIGenerator, "onnxruntime")


def _greedy(logits: np.ndarray) -> np.ndarray:
    """Greedy with EOS masked, as min_length = max_length has genai pick."""
    masked = logits.copy()
    masked[..., EOS] = -np.inf
    return masked.argmax(-1)


@pytest.mark.parametrize("batch", [1, 2])
def test_teacher_forced_matches_eager_fp32(prepared, batch: int) -> None:
    generator = prepared(batch)
    ids = fixed_ids(batch, PROMPT + NEW)
    got = generator.teacher_forced(ids, PROMPT)
    ref = reference_logits(generator.decoder.model, ids, PROMPT)
    assert got.shape == ref.shape == (batch, NEW + 1, TINY["vocab_size"])
    assert got.dtype == np.float32
    assert relative_error(got, ref) < BOUNDS["fp32"]
    assert generator.details["kv_cache_dtype"] == "float32"
    assert generator.details["quantization"] is None


def test_teacher_forced_through_eos(prepared) -> None:
    """A fed EOS would end its row in genai: the rung swaps eos/pad for an unused id."""
    generator = prepared(2)
    ids = fixed_ids(2, PROMPT + NEW)
    ids[:, PROMPT + 1] = EOS
    ids[0, 2] = EOS  # in the prompt as well: not taken for padding
    got = generator.teacher_forced(ids, PROMPT)
    ref = reference_logits(generator.decoder.model, ids, PROMPT)
    assert relative_error(got, ref) < BOUNDS["fp32"]
    assert generator._forcing is not None and generator._forcing[0] not in ids


@pytest.mark.parametrize("batch", [1, 2])
def test_generate_greedy_tokens_and_readings(prepared, batch: int) -> None:
    generator = prepared(batch)
    ids = fixed_ids(batch, PROMPT)
    out = generator.generate(ids, NEW)
    assert out.tokens.shape == (batch, NEW)
    assert out.tokens.dtype == np.int64
    assert len(out.token_ns) == NEW
    assert out.start_ns < out.token_ns[0]
    assert all(a < b for a, b in zip(out.token_ns, out.token_ns[1:], strict=False))
    ref = reference_logits(generator.decoder.model, ids, PROMPT)
    assert (out.tokens[:, 0] == _greedy(ref[:, 0])).all()
    # Every greedy token is the (EOS-masked) argmax of the rung's teacher-forced logits.
    full = np.concatenate([ids, out.tokens], axis=1)
    forced = generator.teacher_forced(full, PROMPT)
    assert (_greedy(forced[:, :NEW]) == out.tokens).all()
    assert generator.weight_bytes() > 0
    table = generator.decoder.model.get_input_embeddings().weight
    assert generator.gathered_bytes() == table.numel() * 4  # fp32, read a row a sequence


def test_generate_never_stops_at_eos(make_decoder, cache) -> None:
    """A model whose greedy pick is EOS still yields NEW tokens per row, none EOS."""
    import torch

    from stackcost.generation.onnxruntime import OrtGenAIGenerator

    decoder = make_decoder("onnxruntime", 2, PROMPT, NEW)
    with torch.no_grad():  # EOS's lm_head row along the final hidden state's direction
        decoder.model.lm_head.weight[EOS] = decoder.model.lm_head.weight.abs().max() * 50
    decoder = dataclasses.replace(decoder, cache=cache, weights_digest="tiny, eos-biased")
    generator = OrtGenAIGenerator(decoder)
    generator.prepare()
    ids = fixed_ids(2, PROMPT)
    ref = reference_logits(decoder.model, ids, PROMPT)
    assert ref[0, 0].argmax() == EOS  # row 0 would end at once, were EOS allowed
    out = generator.generate(ids, NEW)
    assert out.tokens.shape == (2, NEW) and len(out.token_ns) == NEW
    assert (out.tokens != EOS).all()
    assert (out.tokens[:, 0] == _greedy(ref[:, 0])).all()


def test_artifact_reused(prepared) -> None:
    first, second = prepared(1), prepared(1)
    assert first.details["artifact"]["key"] == second.details["artifact"]["key"]
    assert second.details["artifact"]["reused"] is True
    assert "model builder" in second.details["generator"]


@pytest.mark.parametrize("precision", ["w8", "w4"])
def test_weight_only(prepared, precision: str) -> None:
    generator = prepared(1, precision)
    ids = fixed_ids(1, PROMPT + NEW)
    got = generator.teacher_forced(ids, PROMPT)
    ref = reference_logits(generator.decoder.model, ids, PROMPT)
    error = relative_error(got, ref)
    print(f"{precision}: max relative error {error:.2e}")
    assert error < BOUNDS[precision]
    quantization = generator.details["quantization"]
    bits = {"w8": "int8", "w4": "int4"}[precision]
    assert quantization["mapping"].startswith(f"{precision} = builder --precision {bits}")
    (kind,) = quantization["graph"]["quantized"]
    assert kind.startswith(f"{bits} weights, groups of 32, asymmetric")
    assert kind.endswith("accuracy_level 4 (MatMulNBits)")  # the builder's CPU default
    assert quantization["graph"]["float MatMul"] == 0
    out = generator.generate(ids[:, :PROMPT], NEW)
    assert out.tokens.shape == (1, NEW) and len(out.token_ns) == NEW
    fp32 = sum(p.numel() * p.element_size() for p in generator.decoder.model.parameters())
    assert generator.weight_bytes() < fp32
    # The builder quantizes MatMuls only: the input_ids Gather's table stays fp32.
    table = generator.decoder.model.get_input_embeddings().weight
    assert generator.gathered_bytes() == table.numel() * 4


def test_accuracy_level_1_computes_in_fp32_as_the_option_says(prepared) -> None:
    generator = prepared(1, "w8", {"accuracy_level": "1"})
    quantization = generator.details["quantization"]
    assert quantization["mapping"].endswith("accuracy_level=1")
    (kind,) = quantization["graph"]["quantized"]
    assert kind.endswith("accuracy_level 1 (MatMulNBits)")
    ids = fixed_ids(1, PROMPT + NEW)
    got = generator.teacher_forced(ids, PROMPT)
    error = relative_error(got, reference_logits(generator.decoder.model, ids, PROMPT))
    print(f"w8, accuracy_level 1: max relative error {error:.2e}")
    assert error < BOUNDS["w8"]


def test_refuses_other_precisions(make_decoder) -> None:
    from stackcost.backends.base import Unsupported
    from stackcost.generation.onnxruntime import OrtGenAIGenerator

    with pytest.raises(Unsupported, match="int8"):
        OrtGenAIGenerator(make_decoder("onnxruntime", precision="int8")).prepare()
