"""The generator contract: what a rung that generates tokens gives the generate scenario.

A Generator is prepared once per repetition from the cell's decoder (a transformers causal
LM with seeded random weights, fp32, eval mode) and answers two questions:

- `generate(ids, new_tokens)`: greedy decoding of exactly `new_tokens` tokens per row (EOS
  ignored, minimum = maximum) after the prompt `ids`, with the clock reading taken when the
  prompt started and when each output token was ready on the host (the step's output read
  back, so the device is done). Token 0's reading ends prefill plus the first token.
- `teacher_forced(ids, prompt_len)`: the logits the rung computes when fed a fixed
  sequence: the prompt `ids[:, :prompt_len]` as one prefill, then each following token of
  `ids` one decode step at a time through the rung's KV cache. Verification compares them
  with eager fp32's logits of one full forward over `ids` (scenarios/generate.py).

Each runtime is one module in this package, named by its backend's `generator` path; a
module imports its runtime only inside its methods. The scenario, not the rung, turns the
clock readings into TTFT, TPOT and tokens/s (metrics.py), so every rung's numbers mean the
same thing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np
    import torch

    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.cell import Cell


OnToken = Callable[[int], None] | None  # told as each output step is ready


@dataclass
class Decoder:
    """What a generator is prepared from."""

    model: torch.nn.Module  # transformers *ForCausalLM, fp32, eval, seeded weights
    cell: Cell  # batch_size, sizes {"prompt_len", "new_tokens"}, precision, threads
    workdir: Path  # this repetition's scratch directory
    cache: ArtifactCache | None  # the run's artifact cache (exports shared by repetitions)
    weights_digest: str  # part of every artifact's key

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def own_tokenizer(self) -> Path | None:
        """The checkpoint folder holding the model's own tokenizer (tokenizer.json), for a
        pipeline that needs one; None for seeded weights, or a checkpoint without one."""
        folder = self.cell.model.checkpoint_path
        return Path(folder) if folder and (Path(folder) / "tokenizer.json").is_file() else None


# A Hugging Face tokenizer's files, as save_pretrained writes them beside the weights.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "tokenizer.model", "vocab.json", "merges.txt",
)  # fmt: skip


@dataclass
class Generation:
    """One greedy generation: its tokens and its clock readings (time.perf_counter_ns)."""

    tokens: np.ndarray  # (batch, new_tokens) int64: the generated ids, prompt excluded
    start_ns: int  # just before the prompt was handed to the runtime
    token_ns: list[int]  # when output step i was ready, for i in 0..new_tokens-1


@dataclass
class Generator(ABC):
    decoder: Decoder
    # Recorded with the result: the runtime's version, the exported model's path and
    # format, the quantization mapping (Q8_0 = w8), anything the rung chose.
    details: dict[str, Any] = field(default_factory=dict)

    # What drives generation: "transformers generate (DynamicCache)", "onnxruntime-genai
    # Generator", "openvino-genai LLMPipeline", "llama-cpp-python Llama".
    api: ClassVar[str]
    # Where each token's clock reading comes from: "step loop" (the rung's own per-token
    # call, timed around it by stackcost), or "streamer callback" (the runtime's callback,
    # called as each token is ready, within one end-to-end call).
    timing: ClassVar[str]
    # Bytes per element of the KV cache as the rung keeps it (fp32: 4; llama.cpp's f16: 2).
    kv_bytes_per_element: ClassVar[float] = 4.0
    # What the rung can generate at: checked in the parent before any worker starts.
    precisions: ClassVar[frozenset[str]] = frozenset({"fp32"})
    devices: ClassVar[frozenset[str]] = frozenset({"cpu"})
    # The runtime's modules, and how to install them: a cell whose runtime is missing is
    # `unavailable` with that line, before anything is built.
    requires: ClassVar[tuple[str, ...]] = ("transformers",)
    install: ClassVar[str] = "pip install 'stackcost[hf]'"

    @classmethod
    def missing(cls) -> str | None:
        """Why this generator cannot run on this machine, or None."""
        import importlib.util

        absent = [m for m in cls.requires if importlib.util.find_spec(m) is None]
        if not absent:
            return None
        return f"needs {', '.join(absent)}, which is not installed: {cls.install}"

    @abstractmethod
    def prepare(self) -> None:
        """Export, convert, quantize, compile: everything before the first token. Timed as
        the repetition's prepare phase; compilation that happens on first call is the cold
        generation's."""

    @abstractmethod
    def generate(self, ids: np.ndarray, new_tokens: int, on_token: OnToken = None) -> Generation:
        """Greedy generation of exactly `new_tokens` per row after `ids` (batch, prompt_len).
        `on_token(i)` is called as output step i is ready, right after its clock reading
        (LoadGen's token latencies need the first token's moment as it happens)."""

    @abstractmethod
    def teacher_forced(self, ids: np.ndarray, prompt_len: int) -> np.ndarray:
        """Logits (batch, T - prompt_len + 1, vocab) float32 at positions prompt_len-1 .. T-1
        of `ids` (batch, T): one prefill of the prompt, then one cached decode step per
        remaining token."""

    def weight_bytes(self) -> int:
        """The bytes of weights one decode step reads: the rung's own (a GGUF file, an ONNX
        initializer set, quantized or not). Default: the torch module's parameters."""
        return sum(p.numel() * p.element_size() for p in self.decoder.model.parameters())

    def gathered_bytes(self) -> int:
        """The input embedding table's bytes within weight_bytes(): a step gathers one row
        of it per sequence rather than reading it whole. 0 when the LM head shares it (the
        head reads every row each step). Default: the torch module's embedding."""
        model = self.decoder.model
        table = model.get_input_embeddings().weight
        head = model.get_output_embeddings()
        if head is not None and head.weight.data_ptr() == table.data_ptr():
            return 0
        return table.numel() * table.element_size()
