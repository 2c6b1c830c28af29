"""openvino-genai's LLMPipeline rung: teacher-forced logits against eager fp32, greedy
generation's shape and clock readings, and the weight-only precisions."""

from __future__ import annotations

import numpy as np
import pytest

from stackcost.backends.base import Unsupported
from tests.generation.conftest import fixed_ids, prepared_with, reference_logits, relative_error

pytest.importorskip("openvino_genai")
pytest.importorskip("openvino_tokenizers")

PROMPT, NEW = 8, 4
# Observed on a Xeon with avx512_bf16 (f32 forced): fp32 3e-7, w8 9.4e-3, w4 8.9e-2.
BOUNDS = {"fp32": 1e-3, "w8": 2e-2, "w4": 0.25}


@pytest.fixture
def prepared(make_decoder, cache):
    from stackcost.generation.openvino import OpenVINOGenAIGenerator

    return prepared_with(make_decoder, cache, OpenVINOGenAIGenerator, "openvino-genai")


@pytest.mark.parametrize("batch", [1, 2])
def test_teacher_forced_matches_eager_fp32(prepared, batch: int) -> None:
    generator = prepared(batch)
    ids = fixed_ids(batch, PROMPT + NEW)
    got = generator.teacher_forced(ids, PROMPT)
    ref = reference_logits(generator.decoder.model, ids, PROMPT)
    assert got.shape == ref.shape == (batch, NEW + 1, 256)
    assert got.dtype == np.float32
    assert relative_error(got, ref) < BOUNDS["fp32"]
    assert "KV_CACHE_PRECISION=f32" in generator.details["verified_through"]


@pytest.mark.parametrize("batch", [1, 2])
def test_generate_greedy_tokens_and_readings(prepared, batch: int) -> None:
    generator = prepared(batch)
    ids = fixed_ids(batch, PROMPT)
    told: list[int] = []
    on_token = told.append if batch == 1 else None  # streamed (hence told) at batch 1 only
    out = generator.generate(ids, NEW, on_token)
    if batch == 1:
        assert told == list(range(NEW))
    else:
        with pytest.raises(Unsupported, match="batch 1 only"):
            generator.generate(ids, NEW, told.append)
    assert out.tokens.shape == (batch, NEW)
    assert out.tokens.dtype == np.int64
    assert len(out.token_ns) == NEW
    assert out.start_ns < out.token_ns[0]
    assert all(a < b for a, b in zip(out.token_ns, out.token_ns[1:], strict=False))
    ref = reference_logits(generator.decoder.model, ids, PROMPT)
    assert (out.tokens[:, 0] == ref[:, 0].argmax(-1)).all()
    # Every greedy token is the argmax of the rung's own teacher-forced logits.
    full = np.concatenate([ids, out.tokens], axis=1)
    forced = generator.teacher_forced(full, PROMPT)
    assert (forced[:, :NEW].argmax(-1) == out.tokens).all()
    metrics = generator.details["last_perf_metrics"]
    assert metrics["ttft_ms"] > 0 and metrics["tpot_ms"] > 0
    assert generator.weight_bytes() > 0
    table = generator.decoder.model.get_input_embeddings().weight
    assert generator.gathered_bytes() == table.numel() * 4  # fp32, read a row a sequence


def test_eos_is_generated_not_masked(prepared) -> None:
    # This prompt's greedy continuation picks the tokenizer's EOS (id 2) at step 13 (tiny
    # llama, seed 0): exactly new_tokens come back, EOS among them, as eager's argmax says.
    generator = prepared(1)
    ids = fixed_ids(3, 16, seed=5)[2:3]
    out = generator.generate(ids, 16)
    assert out.tokens.shape == (1, 16) and len(out.token_ns) == 16
    forced = generator.teacher_forced(np.concatenate([ids, out.tokens], axis=1), 16)
    assert (forced[:, :16].argmax(-1) == out.tokens).all()
    assert 2 in out.tokens


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
    assert quantization["precision"] == precision
    out = generator.generate(ids[:, :PROMPT], NEW)
    assert out.tokens.shape == (1, NEW) and len(out.token_ns) == NEW
    fp32 = tiny_fp32_bytes(generator)
    assert generator.weight_bytes() < fp32
    # NNCF compresses the embedding too: 8-bit codes, with their scales and zero points.
    table = generator.decoder.model.get_input_embeddings().weight.numel()
    assert table < generator.gathered_bytes() < 2 * table


def tiny_fp32_bytes(generator) -> int:
    return sum(p.numel() * p.element_size() for p in generator.decoder.model.parameters())
