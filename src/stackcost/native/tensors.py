"""SCW1: the tensor file format Python and the C++ programs share (see native/README.md).

magic "SCW1", uint32 count, then per tensor: uint32 name length, UTF-8 name (the
state_dict key), uint32 word = ndim | dtype code << 8, ndim x int64 dims, the data in that
dtype. All little-endian. Code 0 is float32, so a file written before dtypes existed
reads unchanged.

Weights and training data are written as float32 (integer buffers such as BatchNorm's
num_batches_tracked included: the reader casts back into the module's dtype); a model's
inputs and outputs keep their dtype (`keep_dtype=True`), so int64 token ids round-trip.
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
# dtype code -> numpy dtype (little-endian); the C++ side's ScwType (common/scw1.hpp).
DTYPES: dict[int, np.dtype] = {
    0: np.dtype("<f4"),
    1: np.dtype("<i8"),
    2: np.dtype("<i4"),
    3: np.dtype("<f8"),
    4: np.dtype("u1"),
    5: np.dtype("?"),
}
_CODES = {dtype: code for code, dtype in DTYPES.items()}


class FormatError(ValueError):
    """A file that is not a well-formed SCW1 file (wrong magic, truncated, trailing bytes)."""


def _array(tensor: torch.Tensor | np.ndarray, keep_dtype: bool) -> np.ndarray:
    if hasattr(tensor, "detach"):
        t = tensor.detach().cpu()
        if t.is_floating_point() and t.element_size() < 4:  # half, bfloat16: no numpy twin
            t = t.float()
        array = t.numpy()
    else:
        array = np.asarray(tensor)
    dtype = array.dtype.newbyteorder("<")
    if not (keep_dtype and dtype in _CODES):
        dtype = np.dtype("<f4")
    return np.asarray(array, dtype=dtype, order="C")  # ascontiguousarray makes 0-d 1-d


def write_tensors(
    path: Path, tensors: Mapping[str, torch.Tensor | np.ndarray], keep_dtype: bool = False
) -> None:
    """Write `tensors` in order. Without `keep_dtype` every tensor is stored as float32;
    with it, float32/64, int32/64, uint8 and bool keep theirs (others: float32)."""
    parts = [MAGIC, struct.pack("<I", len(tensors))]
    for name, tensor in tensors.items():
        array = _array(tensor, keep_dtype)
        key = name.encode()
        word = array.ndim | _CODES[array.dtype] << 8
        parts += [struct.pack("<I", len(key)), key, struct.pack("<I", word)]
        parts.append(struct.pack(f"<{array.ndim}q", *array.shape))
        parts.append(array.tobytes())
    Path(path).write_bytes(b"".join(parts))


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor in the file, in order, in the dtype it was stored in."""
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
        (word,) = struct.unpack("<I", take(4))
        ndim, code = word & 0xFF, word >> 8
        if code not in DTYPES:
            raise FormatError(f"{path}: {name} has an unknown dtype code {code}")
        if ndim > _MAX_NDIM:
            raise FormatError(f"{path}: {name} has ndim {ndim}")
        dims = struct.unpack(f"<{ndim}q", take(8 * ndim))
        if any(d < 0 for d in dims):
            raise FormatError(f"{path}: {name} has a negative dimension")
        dtype = DTYPES[code]
        count_bytes = dtype.itemsize * int(np.prod(dims, dtype=np.int64))
        out[name] = np.frombuffer(take(count_bytes), dtype=dtype).reshape(dims).copy()
    if pos != len(data):
        raise FormatError(f"{path}: trailing bytes after the last tensor")
    return out
