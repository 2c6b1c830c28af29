"""Datasets for `stackcost train`: real data read from local files, never downloaded.

Every reader returns the same in-memory `Dataset` ((N, C, H, W) images, int64 labels), so
each level of the stack trains on identical arrays. `load_dataset` reads one split and fits
it to the model's input with `resize`. Files that are not there raise `DatasetMissing` with
one line naming the file, the layout expected and where to download it.

This package imports only numpy and the standard library at import time: torch (resize),
scikit-learn (digits) and Pillow (VOC) are imported when they are used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stackcost.data import cifar10, digits, mnist, stdlib_text, stl10, synthetic, voc
from stackcost.data.base import Dataset, DatasetCorrupt, DatasetMissing
from stackcost.data.transform import Mode, resize, resize_images

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetCorrupt",
    "DatasetInfo",
    "DatasetMissing",
    "dataset_info",
    "load_dataset",
    "resize",
    "resize_images",
]


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    description: str
    num_classes: int | None  # None: chosen by the caller (synthetic)
    native_shape: tuple[int, int, int] | None  # (C, H, W); None: set by the caller at load
    needs_data_dir: bool
    splits: tuple[str, ...]
    layout: str  # where the files go under data_dir ("" when none are read)
    url: str  # where to get them ("" when nothing to get)
    fed: str = "images"  # or "text": token blocks for a causal language model


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo(
            "digits",
            "scikit-learn's bundled 8x8 handwritten digits, 1797 images (first 1437 train, "
            "last 360 test)",
            10,
            (1, 8, 8),
            False,
            ("train", "test"),
            "",
            "",
        ),
        DatasetInfo(
            "mnist",
            "MNIST handwritten digits, 60000 train / 10000 test, IDX files",
            10,
            (1, 28, 28),
            True,
            ("train", "test"),
            mnist.LAYOUT,
            mnist.URL,
        ),
        DatasetInfo(
            "cifar10",
            "CIFAR-10, 32x32 colour in 10 classes, 50000 train / 10000 test, python pickles",
            10,
            (3, 32, 32),
            True,
            ("train", "test"),
            cifar10.LAYOUT,
            cifar10.URL,
        ),
        DatasetInfo(
            "stl10",
            "STL-10, 96x96 colour in 10 classes, 5000 train / 8000 test (labelled part), binary",
            10,
            (3, stl10.SIDE, stl10.SIDE),
            True,
            ("train", "test"),
            stl10.LAYOUT,
            stl10.URL,
        ),
        DatasetInfo(
            "voc2012",
            "PASCAL VOC 2012 as 20-class classification by each image's first object, "
            "5717 train / 5823 val ('test' reads val); JPEGs decoded at the requested "
            f"resolution (default {voc.DEFAULT_SIZE})",
            len(voc.CLASSES),
            None,
            True,
            ("train", "val", "test"),
            voc.LAYOUT,
            voc.URL,
        ),
        DatasetInfo(
            stdlib_text.NAME,
            "Python's own standard-library sources as text, for causal language models: "
            "one file in ten held out, a byte-level BPE tokenizer learnt from the rest",
            None,
            None,
            False,
            ("train", "test"),
            "",
            "",
            fed="text",
        ),
        DatasetInfo(
            "synthetic",
            "seeded random uint8 images and labels of any shape, for speed-only runs",
            None,
            None,
            False,
            ("train", "test"),
            "",
            "",
        ),
    )
}


def dataset_info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}") from None


def load_dataset(
    name: str,
    split: str,
    data_dir: Path | str | None = None,
    resolution: int | None = None,
    channels: int | None = None,
    limit: int | None = None,
    *,
    num_classes: int | None = None,
    seed: int = 0,
    mode: Mode = "resize",
) -> Dataset:
    """One split of a dataset, at `resolution` x `resolution` with `channels` channels.

    resolution / channels None keep the native size. limit keeps the first `limit` samples
    (applied before decoding and resizing, so small runs stay cheap). num_classes sets the
    synthetic label count (default 10) and, for real data, is checked against the dataset.
    seed only affects synthetic. mode is "resize" or "pad" (see `resize`).
    """
    info = dataset_info(name)
    if info.fed != "images":
        raise ValueError(f"{name} is text, not images: its splits are token blocks (text_splits)")
    if split not in info.splits:
        raise ValueError(f"{name}: unknown split {split!r}; choose from {', '.join(info.splits)}")
    if info.needs_data_dir and data_dir is None:
        raise DatasetMissing(
            f"{name}: needs data_dir; expected {info.layout}; download: {info.url}"
        )
    if num_classes is not None and info.num_classes not in (None, num_classes):
        raise ValueError(f"{name} has {info.num_classes} classes, not {num_classes}")
    root = Path(data_dir) if data_dir is not None else Path()

    if name == "digits":
        ds = digits.read_digits(split, limit=limit)
    elif name == "mnist":
        ds = mnist.read_mnist(root, split, limit=limit)
    elif name == "cifar10":
        ds = cifar10.read_cifar10(root, split, limit=limit)
    elif name == "stl10":
        ds = stl10.read_stl10(root, split, limit=limit)
    elif name == "voc2012":
        # Decoded straight at the target size: resizing afterwards would cost a second pass.
        ds = voc.read_voc(root, split, size=resolution or voc.DEFAULT_SIZE, limit=limit)
    else:
        ds = synthetic.make_synthetic(
            split,
            synthetic.DEFAULT_SIZES[split] if limit is None else limit,
            channels=channels or 3,
            resolution=resolution or 32,
            num_classes=num_classes or 10,
            seed=seed,
        )
    return resize(ds, resolution, channels, mode=mode)
