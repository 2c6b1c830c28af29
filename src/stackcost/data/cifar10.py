"""CIFAR-10 from the "python version" pickle batches.

Each batch is a pickled dict: b"data" is (N, 3072) uint8, each row the red, green then blue
32x32 plane, each plane row-major, so a plain reshape to (N, 3, 32, 32) is already CHW.
b"labels" is a list of N ints 0..9; batches.meta holds b"label_names".
The pickles are read by a restricted unpickler (data/restricted_pickle.py) that resolves
numpy's array and dtype constructors only: a crafted file cannot run code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stackcost.data import restricted_pickle
from stackcost.data.base import Dataset, DatasetCorrupt, check_limit, find_file, missing

__all__ = ["CLASSES", "LAYOUT", "URL", "read_cifar10"]

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
LAYOUT = (
    "<data_dir>/cifar-10-batches-py/{data_batch_1..data_batch_5,test_batch,batches.meta} "
    "(the extracted cifar-10-python.tar.gz)"
)
BATCHES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
# The order of batches.meta, used when that file is absent.
CLASSES = [
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
]  # fmt: skip


def _roots(data_dir: Path) -> list[Path]:
    return [data_dir / "cifar-10-batches-py", data_dir]


def _unpickle(path: Path) -> dict[Any, Any]:
    try:
        obj = restricted_pickle.load(path, encoding="bytes")
    except Exception as exc:  # nothing of the file ran: whatever broke, it is not a batch
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DatasetCorrupt(f"{path}: not a CIFAR pickle ({why})") from None
    if not isinstance(obj, dict):
        raise DatasetCorrupt(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    return obj


def _get(batch: dict[Any, Any], key: str, path: Path) -> Any:
    # The archive uses bytes keys; a batch re-pickled under Python 3 may use str keys.
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    raise DatasetCorrupt(f"{path}: no {key!r} entry")


def read_cifar10(data_dir: Path | str, split: str = "train", limit: int | None = None) -> Dataset:
    if split not in BATCHES:
        raise ValueError(f"cifar10: unknown split {split!r}; choose from {', '.join(BATCHES)}")
    check_limit(limit)
    data_dir = Path(data_dir)
    roots = _roots(data_dir)
    images: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    source: Path | None = None
    for name in BATCHES[split]:
        if limit is not None and sum(map(len, labels)) >= limit:
            break  # later batches are not needed (nor required to exist)
        path = find_file(roots, [name])
        if path is None:
            raise missing("cifar10", roots[0] / name, LAYOUT, URL)
        source = source or path.parent
        batch = _unpickle(path)
        data = np.asarray(_get(batch, "data", path))
        lab = np.asarray(_get(batch, "labels", path), dtype=np.int64)
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise DatasetCorrupt(
                f"{path}: data is {data.dtype} {data.shape}, expected (N, 3072) uint8"
            )
        if lab.shape != (len(data),):
            raise DatasetCorrupt(f"{path}: {len(data)} images but labels of shape {lab.shape}")
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(lab)
    classes = list(CLASSES)
    meta = find_file(roots, ["batches.meta"])
    if meta is not None:
        classes = [
            n.decode() if isinstance(n, bytes) else str(n)
            for n in _get(_unpickle(meta), "label_names", meta)
        ]
    return Dataset(
        images=np.concatenate(images),
        labels=np.concatenate(labels),
        num_classes=10,
        name="cifar10",
        split=split,
        classes=classes,
        source=str(source),
    ).head(limit)
