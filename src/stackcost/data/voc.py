"""PASCAL VOC 2012, reduced to single-label classification.

Each image gets the class of the FIRST <object> in its Annotations XML (document order, not
the largest or most salient object), as an index into the 20 classes sorted alphabetically.
Splits are ImageSets/Main/train.txt and val.txt; "test" is read as val, since the VOC 2012
test annotations were never released. JPEGs are decoded with Pillow, converted to RGB and
stretched to size x size (bilinear, no crop, so no object is cut off); Pillow's JPEG draft
mode decodes big images at a reduced scale first, which makes small sizes much cheaper.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from stackcost.data.base import Dataset, DatasetCorrupt, check_limit, missing

__all__ = ["CLASSES", "DEFAULT_SIZE", "LAYOUT", "URL", "first_object_class", "read_voc"]

URL = "http://host.robots.ox.ac.uk/pascal/VOC/voc2012/VOCtrainval_11-May-2012.tar"
LAYOUT = (
    "<data_dir>/VOCdevkit/VOC2012/{JPEGImages/<id>.jpg,Annotations/<id>.xml,"
    "ImageSets/Main/train.txt,ImageSets/Main/val.txt} (the extracted VOCtrainval tar)"
)
CLASSES = [
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
]  # fmt: skip
DEFAULT_SIZE = 224  # when the caller gives no resolution; VOC images are up to 500x500
SPLIT_FILES = {"train": "train.txt", "val": "val.txt", "test": "val.txt"}


def _root(data_dir: Path) -> Path:
    for root in (data_dir / "VOCdevkit" / "VOC2012", data_dir / "VOC2012", data_dir):
        if (root / "ImageSets" / "Main").is_dir():
            return root
    return data_dir / "VOCdevkit" / "VOC2012"


def first_object_class(xml_path: Path) -> int:
    """The class index of the first <object> in one VOC annotation."""
    try:
        name = ET.parse(xml_path).getroot().findtext("object/name")
    except ET.ParseError as exc:
        raise DatasetCorrupt(f"{xml_path}: bad XML ({exc})") from exc
    if name is None:
        raise DatasetCorrupt(f"{xml_path}: no <object><name>")
    name = name.strip()
    if name not in CLASSES:
        raise DatasetCorrupt(f"{xml_path}: unknown class {name!r}")
    return CLASSES.index(name)


def read_voc(
    data_dir: Path | str, split: str = "train", size: int = DEFAULT_SIZE, limit: int | None = None
) -> Dataset:
    if split not in SPLIT_FILES:
        raise ValueError(f"voc2012: unknown split {split!r}; choose from {', '.join(SPLIT_FILES)}")
    check_limit(limit)
    if size < 1:
        raise ValueError(f"voc2012: size must be positive, got {size}")
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - Pillow comes with matplotlib
        raise ImportError("voc2012: decoding JPEGs needs Pillow (pip install pillow)") from exc

    root = _root(Path(data_dir))
    list_file = root / "ImageSets" / "Main" / SPLIT_FILES[split]
    if not list_file.is_file():
        raise missing("voc2012", list_file, LAYOUT, URL)
    ids = [line.split()[0] for line in list_file.read_text().splitlines() if line.strip()]
    # Limit before decoding: decoding is the whole cost here.
    ids = ids[:limit]
    images = np.empty((len(ids), 3, size, size), dtype=np.uint8)
    labels = np.empty(len(ids), dtype=np.int64)
    for i, image_id in enumerate(ids):
        xml_path = root / "Annotations" / f"{image_id}.xml"
        jpg_path = root / "JPEGImages" / f"{image_id}.jpg"
        for path in (xml_path, jpg_path):
            if not path.is_file():
                raise missing("voc2012", path, LAYOUT, URL)
        labels[i] = first_object_class(xml_path)
        with Image.open(jpg_path) as img:
            img.draft("RGB", (size, size))
            rgb = img.convert("RGB")
            if rgb.size != (size, size):
                rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
            images[i] = np.asarray(rgb).transpose(2, 0, 1)
    return Dataset(
        images=images,
        labels=labels,
        num_classes=len(CLASSES),
        name="voc2012",
        split="val" if split == "test" else split,
        classes=list(CLASSES),
        source=str(root),
    )
