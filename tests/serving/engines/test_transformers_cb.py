"""The eager rung's continuous-batching engine on a 2-layer llama: its paged cache sized
for the sweep (not the machine's memory), its greedy tokens those of `generate`."""

from __future__ import annotations

import asyncio

import pytest

from stackcost.serving.engine import Request
from stackcost.serving.engines.transformers_cb import (
    MAX_BATCH_TOKENS,
    TransformersEngine,
    cache_config,
)
from stackcost.serving.sweep import MAX_BURST


@pytest.mark.parametrize(
    ("context", "page", "per_request"), [(1, 16, 1), (24, 32, 1), (256, 256, 1), (600, 256, 3)]
)
def test_the_cache_holds_the_largest_burst_at_the_longest_length(
    context: int, page: int, per_request: int
) -> None:
    sizes = cache_config(context)
    assert sizes["page_size"] == page and sizes["num_blocks"] == MAX_BURST * per_request
    assert sizes["page_size"] * sizes["num_blocks"] >= MAX_BURST * context


def tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=97,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def test_the_engine_batches_on_the_sized_cache_and_generates_greedily() -> None:
    import torch

    model = tiny_llama()
    prompt = [5, 17, 33, 2, 60, 8]
    with torch.no_grad():
        expected = model.generate(
            torch.tensor([prompt]), max_new_tokens=4, do_sample=False, eos_token_id=-1,
            pad_token_id=0,
        )[0, len(prompt):].tolist()  # fmt: skip
    engine = TransformersEngine(model, max_new_tokens=8, context=2 * len(prompt) + 8)

    async def serve() -> tuple[list[int], list[int]]:
        await engine.start()
        try:
            got = await engine.greedy(prompt, 4)
            # The manager's own cache, as it built it (not the options it was handed).
            cache = engine.manager.batch_processor.cache
            assert cache.max_batch_tokens == MAX_BATCH_TOKENS
            assert cache.max_tokens_read == 32 * MAX_BURST  # one 32-token page a request

            async def tokens(i: int) -> int:
                return sum([n async for n in engine.stream(Request(i, tuple(prompt), 4))])

            counts = await asyncio.gather(*(tokens(i) for i in range(3)))
            return got, list(counts)
        finally:
            await engine.stop()

    got, counts = asyncio.run(serve())
    assert got == expected and counts == [4, 4, 4]
    cache = engine.details["kv_cache"]
    assert cache == {
        "page_size": 32, "num_blocks": MAX_BURST, "max_batch_tokens": MAX_BATCH_TOKENS,
        "tokens": 32 * MAX_BURST,
    }  # fmt: skip
