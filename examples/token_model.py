"""Bring your own model: a tiny language-model head over int64 token ids.

    stackcost run examples.token_model:WORKLOAD --seq-len 16,64 --batch-size 1,8 \
        --backends eager,torchscript,inductor,export-aot,onnxruntime,openvino

A `Workload` tells stackcost what the model is fed (names, dtypes, shapes over the batch
and the model's own size axes) and how to build it; stackcost draws the inputs from the
seed (token ids inside the vocabulary, masks all ones) and verifies every output.
"""

from __future__ import annotations

import torch
from torch import nn

from stackcost.workload import Input, Workload

VOCAB = 1000


class TokenClassifier(nn.Module):
    """Embedding -> mean over the unmasked tokens -> two outputs: logits and the pooled vector."""

    def __init__(self, vocab: int = VOCAB, dim: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(
        self, tokens: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.relu(self.mix(self.embed(tokens)))  # (batch, seq, dim)
        weights = mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(pooled), pooled


def build(ref, sizes) -> nn.Module:  # called as builder(ModelRef, {"seq_len": N})
    return TokenClassifier(classes=ref.num_classes or 4)


WORKLOAD = Workload(
    name="token-classifier",
    description="nn.Embedding over int64 token ids, masked mean pool, linear head",
    builder=build,
    inputs=(
        Input("tokens", ("batch", "seq_len"), "int64", "ids", high=VOCAB),
        Input("mask", ("batch", "seq_len"), "int64", "mask"),
    ),
    sizes={"seq_len": 32},  # the size axis and its default
    domain="nlp",
    num_classes=4,
)
