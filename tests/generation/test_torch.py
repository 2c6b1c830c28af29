"""The torch generators: eager's DynamicCache and Inductor's compiled StaticCache decode."""

from __future__ import annotations

import numpy as np
import pytest

from stackcost.generation.eager import EagerGenerator
from tests.generation.conftest import fixed_ids, reference_logits


@pytest.mark.parametrize("batch", [1, 3])
def test_eager_teacher_forcing_matches_one_full_forward(make_decoder, batch: int) -> None:
    decoder = make_decoder("eager", batch=batch)
    generator = EagerGenerator(decoder)
    generator.prepare()
    ids = fixed_ids(batch, 12)
    forced = generator.teacher_forced(ids, 8)
    ref = reference_logits(decoder.model, ids, 8)
    assert forced.shape == ref.shape == (batch, 5, 256)
    assert np.abs(forced - ref).max() / np.abs(ref).max() < 1e-5


def test_eager_generates_exactly_the_new_tokens_greedily(make_decoder) -> None:
    decoder = make_decoder("eager", batch=2, new_tokens=6)
    generator = EagerGenerator(decoder)
    generator.prepare()
    ids = fixed_ids(2, 8)
    out = generator.generate(ids, 6)
    assert out.tokens.shape == (2, 6)
    assert len(out.token_ns) == 6 and out.start_ns < out.token_ns[0]
    assert all(a <= b for a, b in zip(out.token_ns[:-1], out.token_ns[1:], strict=True))
    first = reference_logits(decoder.model, ids, 8)[:, 0].argmax(-1)
    assert (out.tokens[:, 0] == first).all()  # greedy: the prefill's argmax


def test_the_gathered_table_is_the_input_embedding_unless_the_head_shares_it(make_decoder):
    from tests.generation.conftest import TINY

    table = TINY["vocab_size"] * TINY["hidden_size"] * 4
    assert EagerGenerator(make_decoder("eager")).gathered_bytes() == table
    tied = make_decoder("eager")
    tied.model.lm_head.weight = tied.model.model.embed_tokens.weight
    assert EagerGenerator(tied).gathered_bytes() == 0


def test_eager_weight_only_int8_is_torchao_and_close(make_decoder) -> None:
    decoder = make_decoder("eager", batch=1, precision="w8")
    fp32 = EagerGenerator(make_decoder("eager", batch=1)).weight_bytes()
    generator = EagerGenerator(decoder)
    generator.prepare()
    assert "torchao" in generator.details["quantization"]["tool"]
    assert generator.weight_bytes() < fp32 / 2  # the linears at 1 byte, the embedding fp32
    assert generator.gathered_bytes() == EagerGenerator(make_decoder("eager")).gathered_bytes()
    ids = fixed_ids(1, 12)
    ref = reference_logits(make_decoder("eager").model, ids, 8)
    forced = generator.teacher_forced(ids, 8)
    assert np.abs(forced - ref).max() / np.abs(ref).max() < 0.05
