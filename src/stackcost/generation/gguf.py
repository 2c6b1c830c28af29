"""A transformers llama-family model, as it is in memory, written as a GGUF file for llama.cpp.

llama.cpp reads GGUF only. Its own converter (convert_hf_to_gguf.py, shipped in the
llama-cpp-python sdist, not in the wheel) reads a checkpoint directory with its tokenizer
files; a decoder here is seeded random weights with no tokenizer, so this module writes
the same file from the module's state_dict with gguf-py's GGUFWriter, following that
converter's choices (conversion/llama.py, conversion/qwen.py, conversion/base.py of the
llama.cpp vendored by llama-cpp-python 0.3.36):

- arch "llama" for LlamaForCausalLM and MistralForCausalLM, "qwen2" for Qwen2ForCausalLM;
- tensor names from gguf.get_tensor_name_map (blk.N.attn_q.weight, ...);
- q_proj/k_proj rows permuted (LlamaModel.permute) for the llama arch: HF's rotary
  embedding rotates the two halves of each head (rotate_half), llama.cpp's LLAMA rope
  (rope type "norm") rotates adjacent pairs, so each head's rows are interleaved. qwen2
  runs llama.cpp's NEOX rope, HF's own layout, so it is written unpermuted;
- the vocabulary: a checkpoint's own GPT-2-style byte-level BPE tokenizer (tokenizer.json
  or vocab.json) as the converter's _set_vocab_gpt2 writes it, through gguf-py's own
  BpeVocab and SpecialVocab (tokens, types, merges, special ids), padded to vocab_size
  with unused tokens; otherwise (seeded weights, or a tokenizer of another kind) a
  synthetic SPM ("llama") vocabulary of vocab_size tokens "<tok_i>": llama.cpp needs a
  tokenizer to load the model, and stackcost feeds token ids, never text. The record
  says which was written.

Quantization is llama.cpp's own (llama_model_quantize), from the f32 file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

# stackcost precision -> llama.cpp file type (the name llama.cpp's quantize tool uses).
FTYPES: dict[str, str] = {"fp32": "F32", "w8": "Q8_0", "w4": "Q4_0"}

# Part of a GGUF artifact's key: a change in what the writer writes names it anew, so no
# file written the old way is reused (2: a byte-level BPE's pre-tokenizer is "gpt-2").
METHOD = "gguf.GGUFWriter, tensor layout after convert_hf_to_gguf.py, 2"

# transformers architecture -> (gguf arch, whether q/k rows are permuted for llama's rope)
ARCHS: dict[str, tuple[str, bool]] = {
    "LlamaForCausalLM": ("llama", True),
    "MistralForCausalLM": ("llama", True),  # convert_hf_to_gguf registers it as LlamaModel
    "Qwen2ForCausalLM": ("qwen2", False),
    "GPT2LMHeadModel": ("gpt2", False),
}
# GPT-2's Conv1D layers keep their weights (in, out): the converter transposes them.
GPT2_CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")
GPT2_BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal masks, not weights


def permute(weights: torch.Tensor, n_head: int, n_head_kv: int | None) -> torch.Tensor:
    """convert_hf_to_gguf's LlamaModel.permute: rotate_half's halves -> adjacent pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _arch(model: torch.nn.Module) -> tuple[str, bool]:
    from stackcost.backends.base import Unsupported

    name = type(model).__name__
    if name not in ARCHS:
        raise Unsupported(f"no GGUF conversion for {name} (llama, mistral, qwen2 and gpt2 only)")
    return ARCHS[name]


def _rope(config: Any) -> dict[str, Any]:
    """The rope parameters: transformers 5's config.rope_parameters, or 4's rope_theta and
    rope_scaling."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    if "rope_theta" not in params:
        params["rope_theta"] = getattr(config, "rope_theta", 10000.0)
    scaling = getattr(config, "rope_scaling", None)
    if scaling and "rope_type" not in params:
        params.update(scaling)
    return params


def _llama3_rope_factors(config: Any, rope: dict[str, Any], head_dim: int) -> list[float]:
    """convert_hf_to_gguf's generate_extra_tensors for llama3 rope scaling (rope_freqs)."""
    import math

    base = rope.get("rope_theta", 10000.0)
    factor = rope.get("factor", 8.0)
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old_ctx = rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    factors = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi / (1.0 / base ** (i / head_dim))
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return factors


def _own_vocabulary(writer: Any, vocab: int, tokenizer: Path) -> str | None:
    """The checkpoint's byte-level BPE tokenizer, as convert_hf_to_gguf's _set_vocab_gpt2
    writes it; None (nothing written) where it is not one, or holds more than `vocab`."""
    import json

    import gguf
    from gguf.vocab import BpeVocab, SpecialVocab

    try:
        bpe = BpeVocab(tokenizer)
    except (FileNotFoundError, ValueError, KeyError, TypeError):  # not a GPT-2-style BPE
        return None
    tokens: list[str] = []
    types: list[int] = []
    for text, _score, kind in bpe.all_tokens():
        tokens.append(text if isinstance(text, str) else text.decode("utf-8"))
        types.append(kind)
    # A special token the trainer also put in the vocabulary is still control, as the
    # converter marks it (gguf-py's BpeVocab types only the tokens added past the vocab).
    # tokenizer.json, read once here (BpeVocab may have read vocab.json and merges.txt).
    path = tokenizer / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    for i in _special_ids(spec):
        if i < len(types):
            types[i] = gguf.TokenType.CONTROL
    if len(tokens) > vocab:
        return None
    for i in range(len(tokens), vocab):  # rows of the embedding no token names
        tokens.append(f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED)
    pre, split = _pre_tokenizer(spec)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = SpecialVocab(tokenizer, load_merges=True, n_vocab=vocab)
    special.add_to_gguf(writer, quiet=True)
    return (
        f"the checkpoint's own (byte-level BPE: {bpe.vocab_size} tokens, "
        f"{len(special.merges)} merges; {split})"
    )


def _pre_tokenizer(spec: dict[str, Any]) -> tuple[str, str]:
    """llama.cpp's name for how the checkpoint splits text before BPE, and in words, from
    its tokenizer.json (`spec`).

    transformers' ByteLevel pre-tokenizer with its regex is GPT-2's split, which llama.cpp
    calls "gpt-2" (its "default" is another regex: punctuation runs first, digits in
    threes). Any other split is not recognised here: llama.cpp's default, and the record
    says its text may split otherwise (stackcost feeds token ids, so no number changes)."""
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2", "GPT-2's pre-tokenizer regex"
    return "default", (
        f"pre-tokenizer {pre.get('type') or 'none'} not recognised: llama.cpp's default "
        "split, which may cut text where the checkpoint's tokenizer does not"
    )


def _special_ids(spec: dict[str, Any]) -> list[int]:
    """The ids of tokenizer.json's (`spec`'s) added tokens marked special."""
    added = spec.get("added_tokens") or []
    return [int(t["id"]) for t in added if t.get("special")]


def _synthetic_vocabulary(writer: Any, config: Any, vocab: int) -> str:
    """One SPM token per id, "<tok_i>": llama.cpp loads no model without a vocabulary."""
    import gguf

    bos = getattr(config, "bos_token_id", None)
    eos = getattr(config, "eos_token_id", None)
    eos = eos[0] if isinstance(eos, list) else eos
    special = {i for i in (bos, eos) if isinstance(i, int) and 0 <= i < vocab}
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<tok_{i}>" for i in range(vocab)])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(vocab)]
    )
    if bos in special:
        writer.add_bos_token_id(bos)
    if eos in special:
        writer.add_eos_token_id(eos)
    writer.add_add_bos_token(False)  # ids are fed as given
    writer.add_add_eos_token(False)
    return f"synthetic (one SPM token per id, {vocab}): the model is fed token ids"


def write_gguf(model: torch.nn.Module, path: Path, tokenizer: Path | None = None) -> dict[str, Any]:
    """Write `model` (fp32 weights as they are in memory) to `path` as an f32 GGUF file,
    with the vocabulary of the tokenizer folder `tokenizer` where it is a byte-level BPE;
    returns what was written (arch, tensor count, tokenizer, seconds)."""
    import gguf

    start = time.perf_counter()
    arch, undo_permute = _arch(model)
    config = model.config
    vocab = config.vocab_size

    writer = gguf.GGUFWriter(str(path), arch)
    extra: dict[str, Any] = {}  # tensors the hyperparameters bring (llama3's rope factors)
    rope_type = _write_hparams(writer, model, arch, extra)

    written = tokenizer is not None and _own_vocabulary(writer, vocab, tokenizer)
    if not written:
        written = _synthetic_vocabulary(writer, config, vocab)
        if tokenizer is not None:
            written += f"; the checkpoint's tokenizer is not a byte-level BPE of {vocab} or fewer"

    tensors = _tensors(model, arch, undo_permute)
    tensors.update(extra)
    for new, data in tensors.items():
        writer.add_tensor(new, data)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {
        "arch": arch,
        "tensors": len(tensors),
        "permuted_qk": undo_permute,
        "rope": rope_type,
        "tokenizer": written,
        "convert_s": time.perf_counter() - start,
    }


def _heads(config: Any) -> tuple[int, int, int]:
    """(attention heads, key/value heads, head size) of a transformers config."""
    n_head = config.num_attention_heads
    n_head_kv = getattr(config, "num_key_value_heads", None) or n_head
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_head
    return n_head, n_head_kv, head_dim


def _write_hparams(writer: Any, model: torch.nn.Module, arch: str, extra: dict[str, Any]) -> str:
    """The model's hyperparameters, as the converter writes them for `arch`; the rope type."""
    import gguf

    config = model.config
    n_head, n_head_kv, head_dim = _heads(config)
    writer.add_name(getattr(config, "name_or_path", "") or type(model).__name__)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_head_count(n_head)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch == "gpt2":  # convert_hf_to_gguf's GPT2Model: learned positions, LayerNorm
        writer.add_feed_forward_length(getattr(config, "n_inner", None) or 4 * config.hidden_size)
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
        return "none (learned positions)"
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    return _write_rope(writer, config, head_dim, extra)


def _tensors(model: torch.nn.Module, arch: str, undo_permute: bool) -> dict[str, np.ndarray]:
    """The model's weights as f32 arrays under their GGUF names, laid out as llama.cpp
    reads them for `arch`."""
    import gguf
    import torch

    from stackcost.backends.base import Unsupported

    config = model.config
    n_head, n_head_kv, _ = _heads(config)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], config.num_hidden_layers)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    tensors: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for name, value in model.state_dict().items():
            if tied and name == "lm_head.weight":
                continue  # llama.cpp falls back to token_embd for a missing output
            if name.endswith("rotary_emb.inv_freq") or name.endswith(GPT2_BUFFERS):
                continue
            data = value.detach().to(torch.float32).cpu()
            if undo_permute and name.endswith(("q_proj.weight", "q_proj.bias")):
                data = permute(data, n_head, n_head)
            elif undo_permute and name.endswith(("k_proj.weight", "k_proj.bias")):
                data = permute(data, n_head, n_head_kv)
            elif arch == "gpt2" and name.endswith(GPT2_CONV1D):
                data = data.T.contiguous()
            new = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if new is None:
                raise Unsupported(f"no GGUF tensor name for {name}")
            tensors[new] = data.numpy()
    if arch == "gpt2" and tied:  # the converter writes GPT-2's tied head out as its own
        output = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.OUTPUT] + ".weight"
        tensors[output] = tensors[gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.TOKEN_EMBD] + ".weight"]
    return tensors


def _write_rope(writer: Any, config: Any, head_dim: int, extra: dict[str, Any]) -> str:
    """The rope hyperparameters (and llama3's factors into `extra`); the rope type."""
    import gguf
    import numpy as np

    from stackcost.backends.base import Unsupported

    rope = _rope(config)
    writer.add_rope_freq_base(float(rope["rope_theta"]))
    rope_type = (rope.get("rope_type") or rope.get("type") or "default").lower()
    if rope_type == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    elif rope_type == "llama3":
        factors = _llama3_rope_factors(config, rope, head_dim)
        extra[gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"] = np.asarray(
            factors, dtype=np.float32
        )
    elif rope_type != "default":
        raise Unsupported(f"rope type {rope_type!r} is not converted to GGUF here")
    return rope_type


def quantize(src: Path, dst: Path, ftype: str, threads: int) -> dict[str, Any]:
    """llama.cpp's own quantizer (llama_model_quantize) from the f32 file to `ftype`
    (FTYPES' values, or another LLAMA_FTYPE_MOSTLY_* name: Q4_K_M)."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = threads
    start = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize to {ftype} failed ({rc})")
    return {
        "ftype": ftype,
        "quantize_s": time.perf_counter() - start,
        "tensor_types": tensor_types(dst),
    }


def tensor_types(path: Path) -> dict[str, int]:
    """How many tensors of each ggml type a file holds: llama.cpp's Q4_0 file type keeps
    norms in F32 and gives output.weight Q6_K (Q8_0 where its rows are not a multiple of
    256), so "w4" is mostly, not only, Q4_0."""
    import gguf

    counts: dict[str, int] = {}
    for tensor in gguf.GGUFReader(path).tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
    return counts
