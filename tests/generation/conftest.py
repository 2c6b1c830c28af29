"""A tiny seeded llama and eager fp32's teacher-forced reference, for every generator's tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stackcost.cell import Cell, ModelRef
from stackcost.generation.base import Decoder

TINY = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)


def tiny_llama(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**TINY)).float().eval()


def reference_logits(model, ids: np.ndarray, prompt_len: int) -> np.ndarray:
    """Eager fp32 over the whole sequence, no cache: the logits at prompt_len-1 .. T-1."""
    import torch

    with torch.inference_mode():
        out = model(torch.from_numpy(ids), use_cache=False).logits
    return out[:, prompt_len - 1 :].float().numpy()


def fixed_ids(batch: int, length: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(
        0, TINY["vocab_size"], (batch, length), dtype=np.int64
    )


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max|got - ref| / max|ref|: verification's measure."""
    return float(np.abs(got - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    """One artifact cache per test module: its builds differ in batch only, so each
    precision is exported once."""
    from stackcost.backends.artifacts import ArtifactCache

    return ArtifactCache(Path(tmp_path_factory.mktemp("artifacts")))


def prepared_with(make_decoder, cache, generator: type, backend: str):
    """A factory of prepared generators of one class, sharing the module's cache."""
    import dataclasses

    def make(batch: int = 1, precision: str = "fp32", options: dict[str, str] | None = None):
        decoder = make_decoder(backend, batch, 8, 4, precision, options)
        prepared = generator(dataclasses.replace(decoder, cache=cache))
        prepared.prepare()
        return prepared

    return make


@pytest.fixture
def make_decoder(tmp_path: Path):
    def make(
        backend: str,
        batch: int = 1,
        prompt_len: int = 8,
        new_tokens: int = 4,
        precision: str = "fp32",
        options: dict[str, str] | None = None,
    ) -> Decoder:
        cell = Cell(
            model=ModelRef(name="llama-tiny"),
            backend=backend,
            mode="generate",
            batch_size=batch,
            sizes={"prompt_len": prompt_len, "new_tokens": new_tokens},
            precision=precision,
            threads=2,
            backend_options=options or {},
        )
        return Decoder(tiny_llama(), cell, tmp_path / "work", None, "tiny")

    return make
