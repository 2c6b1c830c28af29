"""scikit-learn's bundled 8x8 handwritten digits (UCI optdigits test set): real data, no download.

1797 images of 8x8 with values 0..16, scaled here to uint8 0..255 (round(v * 255 / 16)).
Split: deterministic and unshuffled, the first 1437 samples (80%) are "train", the last 360 are
"test". The classes are spread evenly through the file, so the test split holds 33 to 37 of
each digit without any shuffling to seed.
"""

from __future__ import annotations

import numpy as np

from stackcost.data.base import Dataset, check_limit

__all__ = ["CLASSES", "NUM_TRAIN", "read_digits"]

CLASSES = [str(d) for d in range(10)]
NUM_TRAIN = 1437  # int(0.8 * 1797)
SPLITS = ("train", "test")


def read_digits(split: str = "train", limit: int | None = None) -> Dataset:
    if split not in SPLITS:
        raise ValueError(f"digits: unknown split {split!r}; choose from {', '.join(SPLITS)}")
    check_limit(limit)
    # Imported here: sklearn.datasets costs about a second to import.
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = np.rint(bunch.images * (255.0 / 16.0)).astype(np.uint8)[:, None]  # (N, 1, 8, 8)
    labels = bunch.target.astype(np.int64)
    part = slice(None, NUM_TRAIN) if split == "train" else slice(NUM_TRAIN, None)
    return Dataset(
        images=np.ascontiguousarray(pixels[part]),
        labels=labels[part].copy(),
        num_classes=10,
        name="digits",
        split=split,
        classes=list(CLASSES),
        source="bundled",
    ).head(limit)
