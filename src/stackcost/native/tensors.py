"""SCW1: the tensor file format Python and the C++ programs share (see native/README.md).

magic "SCW1", uint32 count, then per tensor: uint32 name length, UTF-8 name (the
state_dict key), uint32 ndim, ndim x int64 dims, float32 data. All little-endian.
Every tensor is stored as float32 (integer buffers such as BatchNorm's
num_batches_tracked included: the reader casts back into the module's dtype).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

MAGIC = b"SCW1"
_MAX_NDIM = 16


class FormatError(ValueError):
    """A file that is not a well-formed SCW1 file (wrong magic, truncated, trailing bytes)."""


def write_tensors(path: Path, tensors: Mapping[str, torch.Tensor | np.ndarray]) -> None:
    parts = [MAGIC, struct.pack("<I", len(tensors))]
    for name, tensor in tensors.items():
        array = tensor.detach().cpu().float().numpy() if hasattr(tensor, "detach") else tensor
        array = np.asarray(array, dtype="<f4", order="C")  # ascontiguousarray makes 0-d 1-d
        key = name.encode()
        parts += [struct.pack("<I", len(key)), key, struct.pack("<I", array.ndim)]
        parts.append(struct.pack(f"<{array.ndim}q", *array.shape))
        parts.append(array.tobytes())
    Path(path).write_bytes(b"".join(parts))


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    data = memoryview(Path(path).read_bytes())
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if n > len(data) - pos:
            raise FormatError(f"{path}: truncated at byte {pos}")
        pos += n
        return data[pos - n : pos]

    if bytes(take(4)) != MAGIC:
        raise FormatError(f"{path}: not an SCW1 file")
    (count,) = struct.unpack("<I", take(4))
    out: dict[str, np.ndarray] = {}
    for _ in range(count):
        (name_len,) = struct.unpack("<I", take(4))
        name = bytes(take(name_len)).decode()
        (ndim,) = struct.unpack("<I", take(4))
        if ndim > _MAX_NDIM:
            raise FormatError(f"{path}: {name} has ndim {ndim}")
        dims = struct.unpack(f"<{ndim}q", take(8 * ndim))
        if any(d < 0 for d in dims):
            raise FormatError(f"{path}: {name} has a negative dimension")
        count_bytes = 4 * int(np.prod(dims, dtype=np.int64))
        out[name] = np.frombuffer(take(count_bytes), dtype="<f4").reshape(dims).copy()
    if pos != len(data):
        raise FormatError(f"{path}: trailing bytes after the last tensor")
    return out
