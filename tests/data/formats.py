"""Writers for tiny files in each dataset's native format, written independently of the readers.

Each writer lays the bytes out as the format's own description says, so a reader that
agrees with it is reading the real layout, not just undoing its own transform.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx(path: Path, array: np.ndarray, magic: int, gz: bool = False) -> Path:
    data = idx_bytes(array, magic)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def write_mnist(root: Path, split: str, images: np.ndarray, labels: np.ndarray, gz: bool = False):
    prefix = "train" if split == "train" else "t10k"
    write_idx(root / f"{prefix}-images-idx3-ubyte", images, 2051, gz)
    write_idx(root / f"{prefix}-labels-idx1-ubyte", labels, 2049, gz)


def write_cifar_batch(
    path: Path, images: np.ndarray, labels: list[int], protocol: int | None = None
) -> None:
    # Row = 1024 red, 1024 green, 1024 blue bytes, each plane row by row.
    rows = np.stack([np.concatenate([img[c].ravel(order="C") for c in range(3)]) for img in images])
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = pickle.dumps({b"batch_label": b"test", b"data": rows, b"labels": labels}, protocol)
    if protocol == 2:  # the archive's Python 2 pickle names numpy 1's module
        blob = blob.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")
    path.write_bytes(blob)


def write_cifar_meta(path: Path, names: list[str]) -> None:
    with path.open("wb") as f:
        pickle.dump({b"label_names": [n.encode() for n in names], b"num_vis": 3072}, f)


def stl_bytes(images: np.ndarray) -> bytes:
    # Each plane column-major (Fortran order): pixel (y, x) at offset x * 96 + y.
    return b"".join(img[c].tobytes(order="F") for img in images for c in range(3))


def voc_xml(image_id: str, objects: list[str]) -> str:
    objs = "".join(
        f"<object><name>{name}</name><pose>Unspecified</pose><truncated>0</truncated>"
        f"<difficult>0</difficult><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>4</xmax>"
        f"<ymax>4</ymax></bndbox></object>"
        for name in objects
    )
    return (
        f"<annotation><folder>VOC2012</folder><filename>{image_id}.jpg</filename>"
        f"<size><width>8</width><height>8</height><depth>3</depth></size>"
        f"<segmented>0</segmented>{objs}</annotation>"
    )
