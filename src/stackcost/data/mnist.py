"""MNIST from its original IDX files (plain or .gz), parsed with numpy.

IDX: a big-endian uint32 magic (0x0000 0x08 ndim: 2051 = ubyte with 3 dims for images,
2049 = ubyte with 1 dim for labels), then ndim big-endian uint32 sizes, then the data row-major.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from stackcost.data.base import Dataset, DatasetCorrupt, check_limit, find_file, missing

__all__ = ["CLASSES", "FILES", "LAYOUT", "URL", "read_idx", "read_mnist"]

URL = "https://ossci-datasets.s3.amazonaws.com/mnist/ (mirror of http://yann.lecun.com/exdb/mnist/)"
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
LAYOUT = (
    "<data_dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] "
    "(also found in <data_dir>/mnist/ or <data_dir>/MNIST/raw/)"
)
CLASSES = [str(d) for d in range(10)]
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


def _roots(data_dir: Path) -> list[Path]:
    # torchvision keeps the raw files in MNIST/raw; accept that tree as it is.
    return [data_dir, data_dir / "mnist", data_dir / "MNIST" / "raw"]


def _candidates(name: str) -> list[str]:
    # Some mirrors spell it "train-images.idx3-ubyte".
    dotted = name.replace("-idx", ".idx")
    return [name, f"{name}.gz", dotted, f"{dotted}.gz"]


def read_idx(path: Path, magic: int) -> np.ndarray:
    """The uint8 array in one IDX file; DatasetCorrupt on a wrong magic or size."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (EOFError, OSError, zlib.error) as exc:  # a truncated or damaged .gz
        raise DatasetCorrupt(f"{path}: cannot decompress ({exc})") from exc
    if len(raw) < 4:
        raise DatasetCorrupt(f"{path}: truncated, {len(raw)} bytes is shorter than an IDX header")
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise DatasetCorrupt(f"{path}: IDX magic {found}, expected {magic}")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetCorrupt(f"{path}: truncated inside the IDX header")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        raise DatasetCorrupt(
            f"{path}: {len(raw) - header} data bytes, header {dims} says {expected} (truncated?)"
        )
    # A copy so the array is writable (np.frombuffer over bytes is read-only).
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def read_mnist(data_dir: Path | str, split: str = "train", limit: int | None = None) -> Dataset:
    if split not in FILES:
        raise ValueError(f"mnist: unknown split {split!r}; choose from {', '.join(FILES)}")
    check_limit(limit)
    data_dir = Path(data_dir)
    paths = []
    for name in FILES[split]:
        path = find_file(_roots(data_dir), _candidates(name))
        if path is None:
            raise missing("mnist", data_dir / f"{name}[.gz]", LAYOUT, URL)
        paths.append(path)
    images = read_idx(paths[0], IMAGES_MAGIC)
    labels = read_idx(paths[1], LABELS_MAGIC)
    if len(images) != len(labels):
        raise DatasetCorrupt(f"mnist: {len(images)} images but {len(labels)} labels in {paths}")
    if labels.size and labels.max() > 9:
        raise DatasetCorrupt(f"{paths[1]}: label {labels.max()} outside 0..9")
    return Dataset(
        images=images[:, None],  # (N, 1, 28, 28)
        labels=labels.astype(np.int64),
        num_classes=10,
        name="mnist",
        split=split,
        classes=list(CLASSES),
        source=str(paths[0].parent),
    ).head(limit)
