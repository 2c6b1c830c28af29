"""STL-10 from the binary release (stl10_binary/*.bin).

{train,test}_X.bin: uint8, N images of 3 * 96 * 96 bytes, one colour plane after the other
(R, G, B), each plane stored column-major (the MATLAB order the dataset was made in). So the
bytes read as (N, 3, 96, 96) are indexed [n, c, x, y]; swapping the last two axes gives the
usual [n, c, y, x] (CHW). This matches the dataset's README and its reference reader, which
reshape to (-1, 3, 96, 96) and transpose.
{train,test}_y.bin: one uint8 label per image, 1..10; mapped here to 0..9.
class_names.txt: one name per line, in label order (fixed list used when absent).
The 100,000-image unlabeled_X.bin is not read: it has no labels to train on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stackcost.data.base import Dataset, DatasetCorrupt, check_limit, find_file, missing

__all__ = ["CLASSES", "LAYOUT", "SIDE", "URL", "read_stl10"]

URL = "http://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz"
LAYOUT = (
    "<data_dir>/stl10_binary/{train_X.bin,train_y.bin,test_X.bin,test_y.bin,class_names.txt} "
    "(the extracted stl10_binary.tar.gz)"
)
SIDE = 96
CLASSES = [
    "airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck",
]  # fmt: skip
SPLITS = ("train", "test")


def _roots(data_dir: Path) -> list[Path]:
    return [data_dir / "stl10_binary", data_dir]


def read_stl10(data_dir: Path | str, split: str = "train", limit: int | None = None) -> Dataset:
    if split not in SPLITS:
        raise ValueError(f"stl10: unknown split {split!r}; choose from {', '.join(SPLITS)}")
    check_limit(limit)
    data_dir = Path(data_dir)
    roots = _roots(data_dir)
    paths = []
    for name in (f"{split}_X.bin", f"{split}_y.bin"):
        path = find_file(roots, [name])
        if path is None:
            raise missing("stl10", roots[0] / name, LAYOUT, URL)
        paths.append(path)
    x_path, y_path = paths
    per_image = 3 * SIDE * SIDE
    size = x_path.stat().st_size
    if size % per_image:
        raise DatasetCorrupt(
            f"{x_path}: {size} bytes is not a whole number of {per_image}-byte images"
        )
    labels = np.fromfile(y_path, dtype=np.uint8)
    n = size // per_image
    if len(labels) != n:
        raise DatasetCorrupt(f"stl10: {x_path} holds {n} images but {y_path} {len(labels)} labels")
    if n and (labels.min() < 1 or labels.max() > 10):
        raise DatasetCorrupt(f"{y_path}: labels outside 1..10")
    # Read only what is asked for: the train split alone is 138 MB.
    count = n if limit is None else min(n, limit)
    raw = np.fromfile(x_path, dtype=np.uint8, count=count * per_image)
    images = np.ascontiguousarray(raw.reshape(count, 3, SIDE, SIDE).transpose(0, 1, 3, 2))
    classes = list(CLASSES)
    names = find_file(roots, ["class_names.txt"])
    if names is not None:
        classes = [line.strip() for line in names.read_text().splitlines() if line.strip()]
    return Dataset(
        images=images,
        labels=labels[:count].astype(np.int64) - 1,
        num_classes=10,
        name="stl10",
        split=split,
        classes=classes,
        source=str(x_path.parent),
    )
