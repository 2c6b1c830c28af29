"""The token arithmetic on stub steps with known timings: one definition, batch counted."""

from __future__ import annotations

import pytest

from stackcost.generation.metrics import TokenTiming, bytes_per_decode_step, kv_cache_bytes

MS = 1_000_000  # ns


def stub(batch: int) -> TokenTiming:
    """Prefill + first token 100 ms after the start, then decode steps of 10, 20, 30 ms."""
    start = 5 * MS
    return TokenTiming(
        batch=batch,
        prompt_len=50,
        start_ns=start,
        token_ns=[start + 100 * MS, start + 110 * MS, start + 130 * MS, start + 160 * MS],
    )


@pytest.mark.parametrize("batch", [1, 4])
def test_token_numbers_from_known_timings(batch: int) -> None:
    t = stub(batch)
    assert t.new_tokens == 4
    assert t.ttft_ns == 100 * MS
    assert t.decode_steps_ns == [10 * MS, 20 * MS, 30 * MS]  # the first token is not one
    assert t.e2e_ns == 160 * MS
    # Prompt tokens across the batch over TTFT: 50 x batch / 0.1 s.
    assert t.prefill_tokens_per_s == pytest.approx(500 * batch)
    # Decode: 3 steps, each a token to every row, in 60 ms; prefill excluded.
    assert t.decode_tokens_per_s == pytest.approx(3 * batch / 0.060)
    assert t.output_tokens_per_s == pytest.approx(4 * batch / 0.160)


def test_one_token_has_no_decode_rate() -> None:
    t = TokenTiming(batch=2, prompt_len=8, start_ns=0, token_ns=[7 * MS])
    assert t.decode_steps_ns == [] and t.decode_tokens_per_s is None
    assert t.ttft_ns == 7 * MS


def test_clock_readings_must_move_forward() -> None:
    with pytest.raises(ValueError, match="back in time"):
        TokenTiming(batch=1, prompt_len=8, start_ns=10, token_ns=[20, 15])
    with pytest.raises(ValueError, match="no output token"):
        TokenTiming(batch=1, prompt_len=8, start_ns=10, token_ns=[])


class Config:  # a llama-shaped config: 2 layers, 4 heads, 2 of them for K/V, width 64
    num_hidden_layers = 2
    num_attention_heads = 4
    num_key_value_heads = 2
    hidden_size = 64
    vocab_size = 100


def test_kv_cache_bytes_count_kv_heads_layers_rows_and_positions() -> None:
    # K and V x 2 layers x 2 kv heads x head dim 16 x 3 rows x 10 positions x 4 bytes
    assert kv_cache_bytes(Config(), batch=3, positions=10, bytes_per_element=4) == (
        2 * 2 * 2 * 16 * 3 * 10 * 4
    )
    per_position = kv_cache_bytes(Config(), 1, 1, 4)
    # The decode reads every weight once and the cache at the mean context (10 + 4 / 2).
    assert bytes_per_decode_step(1000, Config(), 1, 10, 4, 4) == 1000 + per_position * 12


def test_a_step_reads_only_the_batchs_rows_of_the_input_embedding() -> None:
    per_position = kv_cache_bytes(Config(), 3, 1, 4)
    # 400 of the 1000 weight bytes are a 100-row table: 3 sequences read 3 rows (12 bytes).
    got = bytes_per_decode_step(1000, Config(), 3, 10, 4, 4, gathered_bytes=400)
    assert got == 1000 - 400 + 12 + per_position * 12
    # Tied to the LM head (0 gathered): the head reads the table whole, as before.
    assert bytes_per_decode_step(1000, Config(), 3, 10, 4, 4, 0) == 1000 + per_position * 12
