"""Perplexity, KL and same-top from logits: the figures of llama.cpp's llama-perplexity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stackcost.generation.quality import score


def test_a_uniform_guess_has_the_vocabularys_perplexity():
    labels = np.array([[1, 2, 3]])
    quality = score(np.zeros((1, 3, 50), dtype=np.float32), labels)
    assert quality.tokens == 3 and quality.perplexity == pytest.approx(50)
    assert quality.kl_mean is None and quality.same_top is None


def test_kl_is_zero_against_itself_and_grows_with_the_disagreement():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 30)).astype(np.float32)
    labels = rng.integers(0, 30, (2, 5))
    same = score(logits, labels, logits)
    assert same.kl_mean == pytest.approx(0, abs=1e-12) and same.same_top == 1.0
    near = score(logits + rng.normal(scale=0.01, size=logits.shape), labels, logits)
    far = score(logits + rng.normal(scale=1.0, size=logits.shape), labels, logits)
    assert 0 < near.kl_mean < far.kl_mean and far.kl_p99 >= far.kl_mean
    assert far.same_top < 1.0


def test_the_next_token_probability_is_what_perplexity_reads():
    logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]]))
    quality = score(logits, np.array([[0, 1]]))
    assert quality.nll == pytest.approx(-(math.log(0.5) + math.log(0.8)) / 2)


def test_shapes_that_do_not_match_are_refused():
    with pytest.raises(ValueError, match="do not match"):
        score(np.zeros((1, 3, 4)), np.zeros((1, 2), dtype=np.int64))
