"""SCW1: Python writes, Python reads back, and rejects what is not a whole SCW1 file."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from stackcost.native.tensors import MAGIC, FormatError, read_tensors, write_tensors


def sample() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "conv1.weight": torch.randn(4, 3, 3, 3, generator=g),
        "bn1.num_batches_tracked": torch.tensor(7),  # int64, 0-d: stored as float32
        "empty": torch.zeros(0, 5),
        "fc.bias": torch.randn(10, generator=g),
    }


def test_round_trip(tmp_path):
    tensors = sample()
    write_tensors(tmp_path / "w.scw", tensors)
    back = read_tensors(tmp_path / "w.scw")
    assert list(back) == list(tensors)  # order kept
    for name, t in tensors.items():
        assert back[name].dtype == np.float32
        assert back[name].shape == tuple(t.shape)
        np.testing.assert_array_equal(back[name], t.float().numpy())


def test_layout_is_the_documented_one(tmp_path):
    write_tensors(tmp_path / "x.scw", {"ab": torch.tensor([[1.5, -2.0]])})
    expected = (
        MAGIC
        + struct.pack("<I", 1)
        + struct.pack("<I", 2)
        + b"ab"
        + struct.pack("<I", 2)
        + struct.pack("<2q", 1, 2)
        + struct.pack("<2f", 1.5, -2.0)
    )
    assert (tmp_path / "x.scw").read_bytes() == expected


@pytest.mark.parametrize(
    "mangle, match",
    [
        (lambda b: b"XXXX" + b[4:], "not an SCW1"),
        (lambda b: b[:-3], "truncated"),
        (lambda b: b + b"\0", "trailing"),
    ],
)
def test_rejects_bad_files(tmp_path, mangle, match):
    write_tensors(tmp_path / "w.scw", sample())
    path = tmp_path / "bad.scw"
    path.write_bytes(mangle((tmp_path / "w.scw").read_bytes()))
    with pytest.raises(FormatError, match=match):
        read_tensors(path)


def test_inputs_keep_their_dtype(tmp_path):
    # Inputs and outputs keep int64 ids and bool masks; weights are float32 as ever.
    tensors = {
        "ids": torch.tensor([[1, 2**40]], dtype=torch.int64),
        "mask": torch.tensor([True, False]),
        "x": torch.ones(2, dtype=torch.float64),
    }
    write_tensors(tmp_path / "k.scw", tensors, keep_dtype=True)
    back = read_tensors(tmp_path / "k.scw")
    assert [str(a.dtype) for a in back.values()] == ["int64", "bool", "float64"]
    assert back["ids"][0, 1] == 2**40
    write_tensors(tmp_path / "f.scw", tensors)
    assert {str(a.dtype) for a in read_tensors(tmp_path / "f.scw").values()} == {"float32"}
