"""Pickles read without running code: an unpickler that resolves only the globals a
dataset format is known to hold.

`pickle.load` imports and calls whatever a file names (os.system, a module that is not
installed), so a crafted file runs code before any check on what it returned. A dataset
reader instead names the few callables its format needs; any other global is refused as
corrupt, before anything of it is imported or called.
"""

from __future__ import annotations

import codecs
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

# numpy arrays, dtypes and bytes, as numpy 1 and 2 pickle them at protocols 2 to 5 (the
# CIFAR-10 archive is a Python 2 pickle: numpy.core.multiarray._reconstruct), under the
# module names either numpy writes. Each builds an array or a bytes object from data.
NUMPY_ARRAYS: Mapping[tuple[str, str], Any] = {
    **{
        (f"numpy.{core}.multiarray", "_reconstruct"): np._core.multiarray._reconstruct
        for core in ("core", "_core")
    },
    **{
        (f"numpy.{core}.multiarray", "scalar"): np._core.multiarray.scalar
        for core in ("core", "_core")
    },
    **{
        (f"numpy.{core}.numeric", "_frombuffer"): np._core.numeric._frombuffer
        for core in ("core", "_core")
    },
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,  # bytes at protocol 2 under Python 3
}


class Refused(pickle.UnpicklingError):
    """The file names a global its format does not hold."""


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, allowed: Mapping[tuple[str, str], Any], **kwargs: Any):
        super().__init__(file, **kwargs)
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        found = self.allowed.get((module, name))
        if found is None:
            raise Refused(f"it names {module}.{name}, which this format does not hold")
        return found


def load(
    path: Path, allowed: Mapping[tuple[str, str], Any] = NUMPY_ARRAYS, encoding: str = "ASCII"
) -> Any:
    """The object pickled in `path`, built from plain types (dict, list, tuple, str, bytes,
    int, float) and the globals in `allowed` only; Refused (an UnpicklingError) otherwise."""
    with path.open("rb") as f:
        return _Unpickler(f, allowed, encoding=encoding).load()
