"""Each reader returns exactly what a tiny file in the native format holds."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from stackcost.data import DatasetCorrupt, DatasetMissing, load_dataset
from stackcost.data.cifar10 import read_cifar10
from stackcost.data.digits import read_digits
from stackcost.data.mnist import read_mnist
from stackcost.data.stl10 import CLASSES as STL_CLASSES
from stackcost.data.stl10 import read_stl10
from stackcost.data.voc import CLASSES as VOC_CLASSES
from stackcost.data.voc import read_voc
from tests.data.formats import (
    idx_bytes,
    stl_bytes,
    voc_xml,
    write_cifar_batch,
    write_cifar_meta,
    write_idx,
    write_mnist,
)

RNG = np.random.default_rng(1234)


# ---- MNIST (IDX) -------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_reads_exactly_what_was_written(tmp_path: Path, gz: bool) -> None:
    images = RNG.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    labels = np.array([7, 0, 9], dtype=np.uint8)
    write_mnist(tmp_path, "test", images, labels, gz=gz)
    ds = read_mnist(tmp_path, "test")
    assert ds.images.shape == (3, 1, 28, 28) and ds.images.dtype == np.uint8
    np.testing.assert_array_equal(ds.images[:, 0], images)
    np.testing.assert_array_equal(ds.labels, [7, 0, 9])
    assert ds.labels.dtype == np.int64
    assert (ds.name, ds.split, ds.num_classes) == ("mnist", "test", 10)


def test_mnist_torchvision_tree_and_limit(tmp_path: Path) -> None:
    images = RNG.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    write_mnist(tmp_path / "MNIST" / "raw", "train", images, np.array([1, 2, 3]))
    ds = read_mnist(tmp_path, "train", limit=2)
    np.testing.assert_array_equal(ds.images[:, 0], images[:2])
    np.testing.assert_array_equal(ds.labels, [1, 2])
    assert ds.images.flags.writeable


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_idx_errors(tmp_path: Path, gz: bool) -> None:
    images = RNG.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    write_mnist(tmp_path, "train", images, np.array([1, 2, 3]))
    data = idx_bytes(images, 2051)[:-10]
    path = tmp_path / "train-images-idx3-ubyte"
    if gz:
        path.unlink()
        path = tmp_path / "train-images-idx3-ubyte.gz"
        data = gzip.compress(idx_bytes(images, 2051))[:-20]  # cut inside the gzip stream
    path.write_bytes(data)
    with pytest.raises(DatasetCorrupt, match="train-images-idx3-ubyte"):
        read_mnist(tmp_path, "train")


def test_idx_bad_magic_and_count_mismatch(tmp_path: Path) -> None:
    images = RNG.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", images, 2049)  # label magic on images
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([1, 2, 3]), 2049)
    with pytest.raises(DatasetCorrupt, match="magic 2049, expected 2051"):
        read_mnist(tmp_path, "test")
    write_idx(tmp_path / "t10k-images-idx3-ubyte", images, 2051)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([1, 2]), 2049)
    with pytest.raises(DatasetCorrupt, match="3 images but 2 labels"):
        read_mnist(tmp_path, "test")


# ---- CIFAR-10 (pickle batches) ------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, None], ids=["python2-archive", "default"])
def test_cifar10_reads_exactly_what_was_written(tmp_path: Path, protocol: int | None) -> None:
    root = tmp_path / "cifar-10-batches-py"
    images = RNG.integers(0, 256, (4, 3, 32, 32), dtype=np.uint8)
    images[0, 1, 3, 5] = 255  # green, row 3, column 5: byte 1024 + 3 * 32 + 5 of the row
    write_cifar_batch(root / "test_batch", images, [3, 1, 4, 1], protocol)
    names = ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"]
    write_cifar_meta(root / "batches.meta", names)
    ds = read_cifar10(tmp_path, "test")
    assert ds.images.shape == (4, 3, 32, 32) and ds.images.dtype == np.uint8
    np.testing.assert_array_equal(ds.images, images)
    np.testing.assert_array_equal(ds.labels, [3, 1, 4, 1])
    assert ds.classes == names


def test_cifar10_train_concatenates_batches_in_order(tmp_path: Path) -> None:
    batches = [RNG.integers(0, 256, (2, 3, 32, 32), dtype=np.uint8) for _ in range(5)]
    for i, imgs in enumerate(batches, 1):
        write_cifar_batch(tmp_path / f"data_batch_{i}", imgs, [i, i])  # flat dir works too
    ds = read_cifar10(tmp_path, "train")
    np.testing.assert_array_equal(ds.images, np.concatenate(batches))
    np.testing.assert_array_equal(ds.labels, [1, 1, 2, 2, 3, 3, 4, 4, 5, 5])
    assert ds.classes is not None and ds.classes[0] == "airplane"  # no batches.meta: fixed list


def test_cifar10_limit_needs_only_the_first_batch(tmp_path: Path) -> None:
    imgs = RNG.integers(0, 256, (4, 3, 32, 32), dtype=np.uint8)
    write_cifar_batch(tmp_path / "data_batch_1", imgs, [0, 1, 2, 3])
    ds = read_cifar10(tmp_path, "train", limit=3)
    np.testing.assert_array_equal(ds.images, imgs[:3])


# ---- STL-10 (binary) ----------------------------------------------------------------------


def test_stl10_reads_exactly_what_was_written(tmp_path: Path) -> None:
    root = tmp_path / "stl10_binary"
    root.mkdir()
    images = RNG.integers(0, 255, (2, 3, 96, 96), dtype=np.uint8)
    images[1, 2, 1, 5] = 255  # blue, row 1, column 5 of the second image
    raw = stl_bytes(images)
    # Column-major per plane: that pixel sits at column * 96 + row within its plane.
    assert raw[3 * 96 * 96 + 2 * 96 * 96 + 5 * 96 + 1] == 255
    (root / "test_X.bin").write_bytes(raw)
    (root / "test_y.bin").write_bytes(bytes([1, 10]))
    ds = read_stl10(tmp_path, "test")
    assert ds.images.shape == (2, 3, 96, 96) and ds.images.dtype == np.uint8
    np.testing.assert_array_equal(ds.images, images)
    np.testing.assert_array_equal(ds.labels, [0, 9])
    assert ds.classes == STL_CLASSES  # no class_names.txt: the fixed list


def test_stl10_class_names_limit_and_bad_sizes(tmp_path: Path) -> None:
    images = RNG.integers(0, 256, (2, 3, 96, 96), dtype=np.uint8)
    (tmp_path / "train_X.bin").write_bytes(stl_bytes(images))
    (tmp_path / "train_y.bin").write_bytes(bytes([4, 2]))
    (tmp_path / "class_names.txt").write_text("\n".join(f"n{i}" for i in range(10)) + "\n")
    ds = read_stl10(tmp_path, "train", limit=1)
    np.testing.assert_array_equal(ds.images, images[:1])
    np.testing.assert_array_equal(ds.labels, [3])
    assert ds.classes == [f"n{i}" for i in range(10)]
    (tmp_path / "train_X.bin").write_bytes(stl_bytes(images)[:-1])
    with pytest.raises(DatasetCorrupt, match="whole number"):
        read_stl10(tmp_path, "train")


# ---- PASCAL VOC 2012 ----------------------------------------------------------------------


def _voc_tree(tmp_path: Path) -> tuple[Path, list[np.ndarray]]:
    from PIL import Image

    root = tmp_path / "VOCdevkit" / "VOC2012"
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (root / sub).mkdir(parents=True)
    colours = [(200, 30, 30), (20, 40, 220)]
    objects = {"2008_000001": ["dog", "person"], "2008_000002": ["aeroplane", "cat"]}
    sources = []
    for (image_id, objs), colour in zip(objects.items(), colours, strict=True):
        pixels = np.empty((8, 8, 3), dtype=np.uint8)
        pixels[:] = colour
        sources.append(pixels)
        Image.fromarray(pixels).save(root / "JPEGImages" / f"{image_id}.jpg", quality=100)
        (root / "Annotations" / f"{image_id}.xml").write_text(voc_xml(image_id, objs))
    (root / "ImageSets/Main/train.txt").write_text("2008_000001\n2008_000002\n")
    (root / "ImageSets/Main/val.txt").write_text("2008_000002\n")
    return root, sources


def test_voc_first_object_wins_and_pixels_match_decode(tmp_path: Path) -> None:
    from PIL import Image

    root, sources = _voc_tree(tmp_path)
    ds = read_voc(tmp_path, "train", size=8)
    assert ds.images.shape == (2, 3, 8, 8) and ds.images.dtype == np.uint8
    np.testing.assert_array_equal(ds.labels, [VOC_CLASSES.index("dog"), 0])  # not person/cat
    for i, image_id in enumerate(["2008_000001", "2008_000002"]):
        with Image.open(root / "JPEGImages" / f"{image_id}.jpg") as img:
            decoded = np.asarray(img.convert("RGB")).transpose(2, 0, 1)
        np.testing.assert_array_equal(ds.images[i], decoded)  # exactly Pillow's decode
        # JPEG is lossy, but a flat colour at quality 100 comes back within a step or two.
        assert np.abs(ds.images[i].astype(int) - sources[i].transpose(2, 0, 1)).max() <= 3
    assert ds.num_classes == 20 and ds.classes == sorted(VOC_CLASSES)


def test_voc_resizes_and_test_reads_val(tmp_path: Path) -> None:
    _voc_tree(tmp_path)
    ds = load_dataset("voc2012", "test", tmp_path, resolution=4, channels=1)
    assert ds.images.shape == (1, 1, 4, 4) and ds.split == "val"
    np.testing.assert_array_equal(ds.labels, [0])
    assert abs(int(ds.images.mean()) - round((20 + 40 + 220) / 3)) <= 3


def test_voc_missing_jpeg_names_it(tmp_path: Path) -> None:
    root, _ = _voc_tree(tmp_path)
    (root / "JPEGImages" / "2008_000002.jpg").unlink()
    with pytest.raises(DatasetMissing, match=r"JPEGImages/2008_000002\.jpg not found"):
        read_voc(tmp_path, "train", size=8)


# ---- digits (bundled) ---------------------------------------------------------------------


def test_digits_loads_real_bundled_data() -> None:
    train, test = read_digits("train"), read_digits("test")
    assert len(train) + len(test) == 1797 and (len(train), len(test)) == (1437, 360)
    for ds in (train, test):
        assert ds.image_shape == (1, 8, 8) and ds.images.dtype == np.uint8
        assert ds.num_classes == 10 and set(ds.labels.tolist()) == set(range(10))
        assert ds.source == "bundled"
    assert train.images.max() == 255 and train.images.min() == 0


# ---- missing files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "split", "file", "layout"),
    [
        ("mnist", "train", "train-images-idx3-ubyte", "{train,t10k}-{images-idx3"),
        ("mnist", "test", "t10k-images-idx3-ubyte", "{train,t10k}-{images-idx3"),
        ("cifar10", "train", "cifar-10-batches-py/data_batch_1", "cifar-10-batches-py/{"),
        ("cifar10", "test", "cifar-10-batches-py/test_batch", "cifar-10-batches-py/{"),
        ("stl10", "train", "stl10_binary/train_X.bin", "stl10_binary/{train_X.bin"),
        ("voc2012", "val", "VOC2012/ImageSets/Main/val.txt", "VOCdevkit/VOC2012/{"),
    ],
)
def test_missing_files_give_one_line_naming_file_layout_and_url(
    tmp_path: Path, name: str, split: str, file: str, layout: str
) -> None:
    with pytest.raises(DatasetMissing) as info:
        load_dataset(name, split, tmp_path)
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert "\n" not in message
    assert message.startswith(f"{name}: ")
    assert f"{file}" in message and "not found" in message
    assert layout in message and "download: http" in message


def test_missing_data_dir_is_one_line_too() -> None:
    with pytest.raises(DatasetMissing, match=r"^cifar10: needs data_dir; expected .*cifar-10"):
        load_dataset("cifar10", "train")


def test_digits_split_is_disjoint_stratified_and_fixed() -> None:
    train, test = read_digits("train"), read_digits("test")
    counts = np.bincount(test.labels, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 360 / 10 classes, stratified
    rows = {img.tobytes() for img in test.images}
    assert sum(img.tobytes() in rows for img in train.images) < 5  # only duplicate digits
    again = read_digits("test")
    assert np.array_equal(again.labels, test.labels) and np.array_equal(again.images, test.images)
