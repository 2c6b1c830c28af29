"""The llama.cpp server engine counts every token a request was asked for, although the
server holds back a token that ends inside a UTF-8 character and sends it with the next."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from stackcost.serving.engine import Request
from stackcost.serving.engines.llamacpp_server import tokens_so_far


def test_each_event_brings_the_count_its_timings_say() -> None:
    def event(finish: str | None, predicted: int | None = None) -> dict:
        out: dict = {"choices": [{"text": "", "finish_reason": finish}]}
        if predicted is not None:
            out["timings"] = {"predicted_n": predicted, "predicted_ms": 1.0}
        return out

    assert tokens_so_far(event(None), 0) == 1 and tokens_so_far(event(None), 1) == 2
    # The last event's timings count every token: held-back ones bring it up to them.
    assert tokens_so_far(event("length", 4), 2) == 4
    assert tokens_so_far(event("length", 4), 4) == 4  # none held back
    assert tokens_so_far(event("length"), 3) == 3  # a server without timings: as seen


@pytest.mark.skipif(shutil.which("llama-server") is None, reason="no llama-server on PATH")
def test_a_byte_level_vocabulary_streams_every_token_it_was_asked(tmp_path: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from stackcost.data.stdlib_text import END_OF_TEXT, MIN_VOCAB, corpus, train_tokenizer
    from stackcost.generation.gguf import write_gguf
    from stackcost.serving.engines.llamacpp_server import LlamaServerEngine

    tokenizer = train_tokenizer(corpus(), MIN_VOCAB)  # mostly single bytes: split UTF-8
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=END_OF_TEXT).save_pretrained(
        tmp_path
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=MIN_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    write_gguf(LlamaForCausalLM(config).eval(), tmp_path / "m.gguf", tmp_path)
    engine = LlamaServerEngine(
        shutil.which("llama-server") or "", tmp_path / "m.gguf", 1, 2, 256, "f32",
        tmp_path / "server.log",
    )  # fmt: skip

    async def go() -> list[list[int]]:
        await engine.start()
        try:
            out = []
            for i in range(8):
                prompt = tuple(range(100 + i, 116 + i))
                out.append([n async for n in engine.stream(Request(i, prompt, 32))])
            return out
        finally:
            await engine.stop()

    streamed = asyncio.run(go())
    assert all(sum(counts) == 32 for counts in streamed), streamed
    assert any(len(c) < 32 for c in streamed)  # some token was held back to the next event
