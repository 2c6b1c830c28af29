"""How well a decoder predicts held-out text, and how far a rung's predictions are from the
reference's: the figures llama.cpp's `llama-perplexity` reports for a quantization.

From logits (windows, positions, vocab) and the token that follows each position:

- perplexity: exp of the mean negative log-likelihood of the next token, in nats;
- KL(reference || rung) of the two softmaxes at each position: its mean and its 99th
  percentile over the positions;
- same top: how often the rung's most likely token is the reference's.

Computed in float64 from the float32 logits (a log-softmax over 32,000 ids in float32
loses the small probabilities the KL adds up).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Quality:
    tokens: int  # positions scored
    nll: float  # mean negative log-likelihood of the next token, nats
    kl_mean: float | None = None  # KL(reference || this), nats; None for the reference
    kl_p99: float | None = None
    same_top: float | None = None  # fraction of positions whose argmax is the reference's

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nll))


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    from scipy.special import log_softmax

    return log_softmax(np.asarray(logits, dtype=np.float64), axis=-1)


def score(logits: np.ndarray, labels: np.ndarray, reference: np.ndarray | None = None) -> Quality:
    """`logits` (..., vocab) and the next tokens `labels` (...); with the `reference`
    logits of the same positions, the KL and same-top figures against them."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {logits.shape} do not match labels {labels.shape}")
    logp = _log_softmax(logits).reshape(-1, logits.shape[-1])
    flat = labels.reshape(-1)
    nll = float(-logp[np.arange(len(flat)), flat].mean())
    if reference is None:
        return Quality(len(flat), nll)
    if reference.shape != logits.shape:
        raise ValueError(f"reference {reference.shape} does not match logits {logits.shape}")
    ref = _log_softmax(reference).reshape(logp.shape)
    kl = (np.exp(ref) * (ref - logp)).sum(axis=-1)
    same = float((ref.argmax(-1) == logp.argmax(-1)).mean())
    return Quality(len(flat), nll, float(kl.mean()), float(np.percentile(kl, 99)), same)


def window_nll(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The mean negative log-likelihood of each window's next tokens: `logits` (windows,
    positions, vocab), `labels` (windows, positions); one value per window, in nats."""
    logp = _log_softmax(logits)
    picked = np.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    return -picked.mean(axis=-1)
