"""resize, synthetic, the registry and load_dataset."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stackcost.data import DATASETS, Dataset, load_dataset, resize, resize_images
from stackcost.data.synthetic import make_synthetic
from tests.data.formats import write_mnist


def _ds(images: np.ndarray) -> Dataset:
    return Dataset(
        images=images,
        labels=np.zeros(len(images), dtype=np.int64),
        num_classes=2,
        name="t",
        split="train",
        source="synthetic",
    )


# ---- resize -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "resolution", "channels", "expected"),
    [
        ((2, 1, 8, 8), 16, 3, (2, 3, 16, 16)),
        ((2, 1, 28, 28), 32, 1, (2, 1, 32, 32)),
        ((2, 3, 32, 32), 8, 1, (2, 1, 8, 8)),
        ((2, 3, 96, 96), 224, None, (2, 3, 224, 224)),
        ((2, 3, 12, 10), 6, 3, (2, 3, 6, 6)),
    ],
)
def test_resize_gives_requested_shape_and_keeps_dtype(shape, resolution, channels, expected):
    for dtype in (np.uint8, np.float32):
        images = np.random.default_rng(0).integers(0, 256, shape).astype(dtype)
        out = resize(_ds(images), resolution, channels)
        assert out.images.shape == expected and out.images.dtype == dtype
        assert len(out) == shape[0]


def test_resize_channel_conversion_values() -> None:
    grey = np.arange(2 * 16, dtype=np.uint8).reshape(2, 1, 4, 4)
    rgb = resize_images(grey, channels=3)
    assert rgb.shape == (2, 3, 4, 4)
    for c in range(3):
        np.testing.assert_array_equal(rgb[:, c], grey[:, 0])  # grey repeated, untouched
    colour = np.empty((1, 3, 4, 4), dtype=np.uint8)
    colour[0, 0], colour[0, 1], colour[0, 2] = 30, 60, 91
    np.testing.assert_array_equal(resize_images(colour, channels=1), 60)  # round(181 / 3)


def test_resize_of_flat_image_stays_flat_and_pad_centres() -> None:
    flat = np.full((1, 3, 5, 5), 77, dtype=np.uint8)
    np.testing.assert_array_equal(resize_images(flat, 13), 77)
    np.testing.assert_array_equal(resize_images(flat, 2), 77)
    digit = np.random.default_rng(1).integers(1, 256, (2, 1, 28, 28), dtype=np.uint8)
    padded = resize_images(digit, 32, mode="pad")
    np.testing.assert_array_equal(padded[:, :, 2:30, 2:30], digit)
    assert padded.sum(dtype=np.int64) == digit.sum(dtype=np.int64)  # border is zeros
    with pytest.raises(ValueError, match="cannot pad"):
        resize_images(digit, 16, mode="pad")


def test_resize_noop_and_bad_channels() -> None:
    ds = _ds(np.zeros((1, 3, 4, 4), dtype=np.uint8))
    assert resize(ds) is ds and resize(ds, 4, 3) is ds
    with pytest.raises(ValueError, match="only 1 <-> 3"):
        resize(ds, channels=2)


# ---- synthetic ----------------------------------------------------------------------------


def test_synthetic_is_deterministic_per_seed() -> None:
    a = make_synthetic("train", 8, channels=1, resolution=12, num_classes=5, seed=3)
    b = make_synthetic("train", 8, channels=1, resolution=12, num_classes=5, seed=3)
    c = make_synthetic("train", 8, channels=1, resolution=12, num_classes=5, seed=4)
    t = make_synthetic("test", 8, channels=1, resolution=12, num_classes=5, seed=3)
    assert a.images.shape == (8, 1, 12, 12) and a.labels.max() < 5
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, c.images)
    assert not np.array_equal(a.images, t.images)


def test_load_synthetic_uses_requested_shape() -> None:
    ds = load_dataset("synthetic", "test", resolution=20, channels=1, limit=6, num_classes=3)
    assert ds.images.shape == (6, 1, 20, 20) and ds.num_classes == 3
    assert len(load_dataset("synthetic", "train")) == 1024


# ---- registry and load_dataset ------------------------------------------------------------


def test_registry_entries() -> None:
    images = {"digits", "mnist", "cifar10", "stl10", "voc2012", "synthetic"}
    assert set(DATASETS) == images | {"stdlib-text"}
    assert {name for name, info in DATASETS.items() if info.fed == "images"} == images
    for name, info in DATASETS.items():
        assert info.name == name and info.description and info.splits
        if info.needs_data_dir:
            assert info.layout.startswith("<data_dir>/") and info.url.startswith("http")
    assert DATASETS["mnist"].native_shape == (1, 28, 28)
    assert DATASETS["stl10"].native_shape == (3, 96, 96)
    assert not DATASETS["digits"].needs_data_dir


def test_load_dataset_end_to_end_fits_model_input(tmp_path: Path) -> None:
    images = np.random.default_rng(2).integers(0, 256, (3, 28, 28), dtype=np.uint8)
    write_mnist(tmp_path, "train", images, np.array([5, 6, 7]), gz=True)
    ds = load_dataset("mnist", "train", tmp_path, resolution=32, channels=3, limit=2)
    assert ds.images.shape == (2, 3, 32, 32)
    np.testing.assert_array_equal(ds.labels, [5, 6])
    native = load_dataset("mnist", "train", tmp_path)
    np.testing.assert_array_equal(native.images[:, 0], images)


def test_load_dataset_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
        load_dataset("imagenet", "train")
    with pytest.raises(ValueError, match="unknown split 'val'"):
        load_dataset("digits", "val")
    with pytest.raises(ValueError, match="has 10 classes, not 5"):
        load_dataset("digits", "train", num_classes=5)
    with pytest.raises(ValueError, match="limit must be a positive int"):
        load_dataset("mnist", "train", tmp_path, limit=0)


def test_dataset_validates_its_arrays() -> None:
    images = np.zeros((2, 1, 4, 4), dtype=np.uint8)
    meta = dict(num_classes=2, name="t", split="train", source="x")
    with pytest.raises(ValueError, match="int64"):
        Dataset(images=images, labels=np.zeros(2, np.int32), **meta)
    with pytest.raises(ValueError, match="outside"):
        Dataset(images=images, labels=np.array([0, 2]), **meta)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        Dataset(images=images[0], labels=np.zeros(1, np.int64), **meta)


def test_import_is_light() -> None:
    code = (
        "import sys, stackcost.data; "
        "print(sorted(m for m in ('torch', 'sklearn', 'PIL') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
