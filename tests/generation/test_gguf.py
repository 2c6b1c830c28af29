"""The GGUF writer's metadata, tensor names and q/k layout, read back with gguf.GGUFReader
(no llama.cpp needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.generation.conftest import TINY, tiny_llama

pytest.importorskip("gguf")


def _read(path: Path):
    import gguf

    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    return fields, tensors


def test_llama_metadata_and_tensors(tmp_path: Path) -> None:
    from stackcost.generation.gguf import permute, write_gguf

    model = tiny_llama()
    record = write_gguf(model, tmp_path / "m.gguf")
    fields, tensors = _read(tmp_path / "m.gguf")

    assert record["arch"] == "llama" and record["permuted_qk"]
    assert fields["general.architecture"] == "llama"
    assert fields["llama.block_count"] == TINY["num_hidden_layers"]
    assert fields["llama.embedding_length"] == TINY["hidden_size"]
    assert fields["llama.feed_forward_length"] == TINY["intermediate_size"]
    assert fields["llama.attention.head_count"] == TINY["num_attention_heads"]
    assert fields["llama.attention.head_count_kv"] == TINY["num_key_value_heads"]
    head_dim = TINY["hidden_size"] // TINY["num_attention_heads"]
    assert fields["llama.rope.dimension_count"] == head_dim
    assert fields["llama.rope.freq_base"] == pytest.approx(10000.0)
    assert fields["general.file_type"] == 0  # ALL_F32
    assert fields["tokenizer.ggml.model"] == "llama"
    assert len(fields["tokenizer.ggml.tokens"]) == TINY["vocab_size"]
    assert len(fields["tokenizer.ggml.token_type"]) == TINY["vocab_size"]
    assert fields["tokenizer.ggml.bos_token_id"] == 1
    assert fields["tokenizer.ggml.eos_token_id"] == 2

    per_block = [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
        "attn_norm",
        "ffn_norm",
    ]
    expected = {"token_embd.weight", "output_norm.weight", "output.weight"} | {
        f"blk.{b}.{n}.weight" for b in range(TINY["num_hidden_layers"]) for n in per_block
    }
    assert set(tensors) == expected
    assert all(t.dtype == np.float32 for t in tensors.values())

    state = {k: v.numpy() for k, v in model.state_dict().items()}
    layer = "model.layers.1.self_attn."
    np.testing.assert_array_equal(tensors["blk.1.attn_v.weight"], state[layer + "v_proj.weight"])
    q = permute(
        model.state_dict()[layer + "q_proj.weight"],
        TINY["num_attention_heads"],
        TINY["num_attention_heads"],
    ).numpy()
    k = permute(
        model.state_dict()[layer + "k_proj.weight"],
        TINY["num_attention_heads"],
        TINY["num_key_value_heads"],
    ).numpy()
    np.testing.assert_array_equal(tensors["blk.1.attn_q.weight"], q)
    np.testing.assert_array_equal(tensors["blk.1.attn_k.weight"], k)
    assert not np.array_equal(q, state[layer + "q_proj.weight"])


def test_the_gathered_table_is_token_embd_unless_the_file_ties_it(tmp_path: Path) -> None:
    from stackcost.generation.gguf import write_gguf
    from stackcost.generation.llamacpp import gguf_gathered_bytes

    model = tiny_llama()
    write_gguf(model, tmp_path / "m.gguf")
    assert gguf_gathered_bytes(tmp_path / "m.gguf") == TINY["vocab_size"] * TINY["hidden_size"] * 4
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    write_gguf(model, tmp_path / "tied.gguf")
    assert "output.weight" not in _read(tmp_path / "tied.gguf")[1]
    assert gguf_gathered_bytes(tmp_path / "tied.gguf") == 0


def test_permute_interleaves_each_heads_halves() -> None:
    import torch

    from stackcost.generation.gguf import permute

    # one head of dim 4: rows [a0, a1, b0, b1] (rotate_half pairs a_i with b_i) -> a0 b0 a1 b1
    rows = torch.arange(8.0).reshape(8, 1)  # two heads
    assert permute(rows, 2, 2).flatten().tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_qwen2_keeps_hf_layout_and_biases(tmp_path: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from stackcost.generation.gguf import write_gguf

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**TINY, tie_word_embeddings=True)).eval()
    record = write_gguf(model, tmp_path / "q.gguf")
    fields, tensors = _read(tmp_path / "q.gguf")
    assert record["arch"] == "qwen2" and not record["permuted_qk"]
    assert fields["general.architecture"] == "qwen2"
    assert "output.weight" not in tensors  # tied: llama.cpp reads token_embd
    assert "blk.0.attn_q.bias" in tensors
    np.testing.assert_array_equal(
        tensors["blk.0.attn_q.weight"], model.state_dict()["model.layers.0.self_attn.q_proj.weight"]
    )


def _tiny_gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=272, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    return GPT2LMHeadModel(config).eval()


def test_gpt2_is_written_as_the_converter_writes_it(tmp_path: Path) -> None:
    from stackcost.generation.gguf import write_gguf

    model = _tiny_gpt2()
    record = write_gguf(model, tmp_path / "g.gguf")
    fields, tensors = _read(tmp_path / "g.gguf")
    state = model.state_dict()
    assert record["arch"] == "gpt2" and fields["general.architecture"] == "gpt2"
    assert fields["gpt2.context_length"] == 64 and fields["gpt2.feed_forward_length"] == 128
    assert fields["gpt2.attention.layer_norm_epsilon"] == pytest.approx(1e-5)
    assert "blk.0.attn_qkv.weight" in tensors and "position_embd.weight" in tensors
    assert not any(name.endswith("attn.bias") for name in tensors)  # masks, not weights
    # Conv1D keeps (in, out); llama.cpp's linear layers read (out, in)
    np.testing.assert_array_equal(
        tensors["blk.0.attn_qkv.weight"], state["transformer.h.0.attn.c_attn.weight"].T
    )
    np.testing.assert_array_equal(tensors["output.weight"], tensors["token_embd.weight"])


def test_llama_cpp_computes_gpt2s_logits_from_the_file(tmp_path: Path) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    import torch

    from stackcost.generation.gguf import write_gguf

    model = _tiny_gpt2()
    write_gguf(model, tmp_path / "g.gguf")
    llm = llama_cpp.Llama(str(tmp_path / "g.gguf"), n_ctx=64, logits_all=True, verbose=False)
    ids = [5, 17, 200, 3, 99, 42]
    llm.eval(ids)
    theirs = np.asarray(llm.scores[: len(ids)])
    with torch.inference_mode():
        ours = model(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(theirs, ours, atol=1e-3 * np.abs(ours).max())


def test_other_architectures_are_unsupported(tmp_path: Path) -> None:
    import torch

    from stackcost.backends.base import Unsupported
    from stackcost.generation.gguf import write_gguf

    with pytest.raises(Unsupported):
        write_gguf(torch.nn.Linear(2, 2), tmp_path / "x.gguf")


def _byte_level_bpe(folder: Path, vocab_size: int) -> object:
    """A GPT-2-style tokenizer (byte-level BPE) trained on a few lines, saved as
    save_pretrained does; returns the tokenizers.Tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(["def f(x):\n    return x + 1\n"] * 20, trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    ).save_pretrained(folder)
    return bpe


def test_a_checkpoints_byte_level_bpe_is_the_files_vocabulary(tmp_path: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from stackcost.generation.gguf import write_gguf

    bpe = _byte_level_bpe(tmp_path / "tok", 270)
    ids = bpe.get_vocab_size()
    assert 257 < ids <= 270  # the 256 bytes, the special token, a few merges
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{**TINY, "vocab_size": 272})).eval()
    record = write_gguf(model, tmp_path / "m.gguf", tmp_path / "tok")
    fields, _ = _read(tmp_path / "m.gguf")

    assert record["tokenizer"].startswith("the checkpoint's own (byte-level BPE")
    assert fields["tokenizer.ggml.model"] == "gpt2"
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens) == 272  # one per embedding row: the rows no token names are unused
    assert tokens[:ids] == [bpe.id_to_token(i) for i in range(ids)]
    assert tokens[ids:] == [f"[PAD{i}]" for i in range(ids, 272)]
    merges = fields["tokenizer.ggml.merges"]
    assert merges and all(len(m.split(" ")) == 2 for m in merges)
    eot = bpe.token_to_id("<|endoftext|>")
    assert fields["tokenizer.ggml.eos_token_id"] == eot
    assert fields["tokenizer.ggml.token_type"][eot] == 3  # CONTROL
    assert fields["tokenizer.ggml.pre"] == "gpt-2" and "GPT-2's" in record["tokenizer"]


def test_llama_cpp_splits_text_as_the_checkpoints_own_tokenizer_does(tmp_path: Path):
    """llama.cpp's "default" pre-tokenizer cuts digits in threes and punctuation runs
    apart; a GPT-2 byte-level BPE does neither, so the GGUF must say "gpt-2"."""
    llama_cpp = pytest.importorskip("llama_cpp")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from stackcost.generation.gguf import write_gguf

    bpe = _byte_level_bpe(tmp_path / "tok", 300)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{**TINY, "vocab_size": 304})).eval()
    write_gguf(model, tmp_path / "m.gguf", tmp_path / "tok")
    llm = llama_cpp.Llama(str(tmp_path / "m.gguf"), vocab_only=True, verbose=False)
    text = "def f(x):\n    return x ** 123456 + len('ab')!!  # done\n"
    assert llm.tokenize(text.encode(), add_bos=False, special=False) == bpe.encode(text).ids


def test_a_tokenizer_of_another_kind_leaves_the_synthetic_vocabulary_and_says_so(
    tmp_path: Path,
) -> None:
    from stackcost.generation.gguf import write_gguf
    from tests.zoo.test_checkpoint import save_tokenizer  # BPE on whitespace words

    save_tokenizer(tmp_path / "tok")
    record = write_gguf(tiny_llama(), tmp_path / "m.gguf", tmp_path / "tok")
    fields, _ = _read(tmp_path / "m.gguf")
    assert (
        record["tokenizer"].startswith("synthetic")
        and "not a byte-level BPE" in record["tokenizer"]
    )
    assert fields["tokenizer.ggml.model"] == "llama"
    assert fields["tokenizer.ggml.tokens"][:2] == ["<tok_0>", "<tok_1>"]
