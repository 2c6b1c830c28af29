"""Seeded random images and labels, for speed-only runs where accuracy means nothing.

The generator is seeded from (seed, split), so the same arguments give the same arrays on
every machine and run, and train and test differ from each other.
"""

from __future__ import annotations

import numpy as np

from stackcost.data.base import Dataset

__all__ = ["DEFAULT_SIZES", "make_synthetic"]

DEFAULT_SIZES = {"train": 1024, "test": 256}
_SPLIT_KEYS = {"train": 0, "test": 1}


def make_synthetic(
    split: str = "train",
    n: int | None = None,
    *,
    channels: int = 3,
    resolution: int = 32,
    num_classes: int = 10,
    seed: int = 0,
) -> Dataset:
    if split not in _SPLIT_KEYS:
        raise ValueError(f"synthetic: unknown split {split!r}; choose from train, test")
    n = DEFAULT_SIZES[split] if n is None else n
    if min(n, channels, resolution, num_classes) < 1:
        raise ValueError("synthetic: n, channels, resolution and num_classes must be positive")
    rng = np.random.default_rng([seed, _SPLIT_KEYS[split]])
    images = rng.integers(0, 256, size=(n, channels, resolution, resolution), dtype=np.uint8)
    labels = rng.integers(0, num_classes, size=n, dtype=np.int64)
    return Dataset(
        images=images,
        labels=labels,
        num_classes=num_classes,
        name="synthetic",
        split=split,
        source="synthetic",
    )
