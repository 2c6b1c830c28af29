"""Token arithmetic: one definition of every token rate, used by every rung and view.

Definitions (docs/guides/generate.md says the same):
- TTFT (time to first token) = first output token ready - prompt handed over: prefill of
  the whole prompt plus choosing the first token.
- TPOT (time per output token) = the interval between consecutive output steps, i.e. the
  decode steps 1 .. N-1; one step gives one token to every row of the batch. The first
  token is not a decode step: it belongs to TTFT.
- prefill tokens/s = batch x prompt_len / TTFT: prompt tokens across the batch.
- decode tokens/s = batch x (N - 1) / (last token - first token): output tokens across
  the batch, prefill excluded (and the first token with it).
- end-to-end = last token ready - prompt handed over; output tokens/s = batch x N / e2e.
Generation is greedy, seeded, and runs exactly N tokens per row (EOS ignored).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFINITION = (
    "greedy, seeded, exactly new_tokens per row (EOS ignored); tokens/s count every row of "
    "the batch; decode excludes prefill and the first token (TTFT)"
)


@dataclass(frozen=True)
class TokenTiming:
    """One generation's readings in ns (perf_counter_ns), and what it generated."""

    batch: int
    prompt_len: int
    start_ns: int
    token_ns: Sequence[int]  # output step i ready, i = 0 .. N-1

    def __post_init__(self) -> None:
        if not self.token_ns:
            raise ValueError("a generation with no output token has no timing")
        steps = np.diff(np.asarray([self.start_ns, *self.token_ns], dtype=np.int64))
        if np.any(steps < 0):
            raise ValueError("token readings must not go back in time")

    @property
    def new_tokens(self) -> int:
        return len(self.token_ns)

    @property
    def ttft_ns(self) -> int:
        return int(self.token_ns[0] - self.start_ns)

    @property
    def decode_steps_ns(self) -> list[int]:
        """TPOT samples: one per decode step (N - 1 of them)."""
        return [int(b - a) for a, b in zip(self.token_ns[:-1], self.token_ns[1:], strict=True)]

    @property
    def e2e_ns(self) -> int:
        return int(self.token_ns[-1] - self.start_ns)

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.batch * self.prompt_len / (self.ttft_ns / 1e9)

    @property
    def decode_tokens_per_s(self) -> float | None:
        """None with a single output token: there is no decode step to rate."""
        span = self.token_ns[-1] - self.token_ns[0]
        if self.new_tokens < 2 or span <= 0:
            return None
        return self.batch * (self.new_tokens - 1) / (span / 1e9)

    @property
    def output_tokens_per_s(self) -> float:
        return self.batch * self.new_tokens / (self.e2e_ns / 1e9)


def kv_cache_bytes(config: object, batch: int, positions: int, bytes_per_element: float) -> int:
    """The KV cache's size holding `positions` tokens for every row: keys and values of
    every layer, for the key/value heads (grouped-query attention has fewer than heads)."""
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // heads
    return int(2 * layers * kv_heads * int(head_dim) * batch * positions * bytes_per_element)


def bytes_per_decode_step(
    weight_bytes: int,
    config: object,
    batch: int,
    prompt_len: int,
    new_tokens: int,
    bytes_per_element: float,
    gathered_bytes: int = 0,
) -> int:
    """What one decode step reads, on average over the decode: every weight once (shared by
    the batch) but the input embedding table (`gathered_bytes` of the weights), of which it
    reads one row a sequence, and the KV cache at the mean context, prompt_len +
    new_tokens / 2. Counted whole, the table put the README's hf:qwen3 (vocabulary 151,936,
    hidden 256: the table 155 MB of 321) at 166-244% of the memory peak."""
    mean_positions = prompt_len + new_tokens / 2
    kv = kv_cache_bytes(config, batch, 1, bytes_per_element) * mean_positions
    rows = gathered_bytes * min(batch, int(config.vocab_size)) / int(config.vocab_size)
    return int(weight_bytes - gathered_bytes + rows + kv)
