"""The in-memory dataset every reader returns, and the errors they raise.

numpy only: the registry and the CLI import this without paying for torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

__all__ = ["Dataset", "DatasetCorrupt", "DatasetMissing", "check_limit", "find_file", "missing"]


class DatasetMissing(FileNotFoundError):
    """A file a reader needs is not under `data_dir`; the message is one line naming it."""


class DatasetCorrupt(ValueError):
    """A file is there but is not what its format says (bad magic, truncated, wrong sizes)."""


@dataclass(kw_only=True)
class Dataset:
    """One split of a dataset, whole in memory.

    images: (N, C, H, W), uint8 (0..255) or float32; labels: (N,) int64 in [0, num_classes).
    source: the directory or file read, or "bundled" / "synthetic".
    """

    images: np.ndarray
    labels: np.ndarray
    num_classes: int
    name: str
    split: str
    source: str
    classes: list[str] | None = field(default=None)

    def __post_init__(self) -> None:
        # Checked once here so the trainer never has to guess what a reader handed it.
        if self.images.ndim != 4:
            raise ValueError(f"{self.name}: images must be (N, C, H, W), got {self.images.shape}")
        if self.images.dtype not in (np.uint8, np.float32):
            raise ValueError(
                f"{self.name}: images must be uint8 or float32, not {self.images.dtype}"
            )
        if self.labels.dtype != np.int64 or self.labels.shape != (len(self.images),):
            raise ValueError(
                f"{self.name}: labels must be int64 of shape ({len(self.images)},), "
                f"got {self.labels.dtype} {self.labels.shape}"
            )
        if self.classes is not None and len(self.classes) != self.num_classes:
            raise ValueError(f"{self.name}: {len(self.classes)} class names for {self.num_classes}")
        if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= self.num_classes):
            raise ValueError(f"{self.name}: labels outside [0, {self.num_classes})")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one image."""
        _, c, h, w = self.images.shape
        return c, h, w

    def head(self, n: int | None) -> Dataset:
        """The first n samples (all if n is None), as contiguous writable copies."""
        if n is None or n >= len(self):
            return self
        return replace(self, images=self.images[:n].copy(), labels=self.labels[:n].copy())


def check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")


def missing(name: str, expected: Path | str, layout: str, url: str) -> DatasetMissing:
    # One line on purpose: it is what a CLI user sees, and it must say what to fetch and where.
    return DatasetMissing(f"{name}: {expected} not found; expected {layout}; download: {url}")


def find_file(roots: Iterable[Path], names: Iterable[str]) -> Path | None:
    """The first existing roots[i]/names[j], roots outermost; None if there is none."""
    names = list(names)
    for root in roots:
        for name in names:
            path = root / name
            if path.is_file():
                return path
    return None
