"""A small DLRM-style recommender (Naumov et al., 2019), stackcost's own definition.

Dense features go through a bottom MLP (13 -> 64 -> 16); each of 8 sparse features is a
fixed-length bag of 4 ids into its own table of 1000 x 16, summed; the pairwise dot products of the 9 vectors (bottom output and 8 embeddings,
upper triangle without the diagonal: 36) are concatenated with the bottom output and go
through a top MLP (52 -> 128 -> 64 -> 1) to one logit. 145,041 parameters, 128,000 of
them in the tables.

Each table is an `nn.Embedding` whose 4 looked-up rows are summed: exactly what
`nn.EmbeddingBag(mode="sum")` computes for fixed-length bags (same weights, same init,
N(0, 1) rows), written as gather + sum because that graph runs everywhere. With
EmbeddingBag, torch.onnx's dynamo exporter (torch 2.13) writes one ONNX Loop per table,
iterating over the bags one by one: ONNX Runtime runs it (slowly, a measure of the
exporter rather than the model) and OpenVINO 2026.4 refuses it ("Conversion is failed for:
ReduceSum-20, Slice-20": the loop body's types are dynamic).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from stackcost.cell import ModelRef

DENSE = 13
TABLES = 8
ROWS = 1000
BAG = 4
DIM = 16
BOTTOM = (64, DIM)
TOP = (128, 64)


def mlp(sizes: tuple[int, ...], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False)):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """forward(dense float (batch, 13), sparse int64 (batch, 8, 4)) -> logit (batch, 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.bottom = mlp((DENSE, *BOTTOM), last_relu=True)
        self.tables = nn.ModuleList(nn.Embedding(ROWS, DIM) for _ in range(TABLES))
        n = TABLES + 1
        self.top = mlp((DIM + n * (n - 1) // 2, *TOP, 1), last_relu=False)
        i, j = torch.triu_indices(n, n, offset=1)
        # Flat positions of the upper triangle of the (n, n) interaction matrix. Not state
        # (persistent=False): the weights digest is over the parameters.
        self.register_buffer("pairs", i * n + j, persistent=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        # Sum-pooled bags: (batch, 4) ids -> (batch, 4, 16) rows -> (batch, 16).
        features = [x] + [table(sparse[:, k]).sum(1) for k, table in enumerate(self.tables)]
        t = torch.stack(features, dim=1)  # (batch, 9, 16)
        dots = torch.bmm(t, t.transpose(1, 2)).flatten(1)[:, self.pairs]
        return self.top(torch.cat([x, dots], dim=1))


def dlrm_small(ref: ModelRef, sizes: Mapping[str, int]) -> nn.Module:
    """PyTorch's default initialization (the tables' rows N(0, 1)), seeded by the caller."""
    return DLRM()
