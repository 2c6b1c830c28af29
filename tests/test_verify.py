import math

import numpy as np
import torch

from stackcost.verify import to_numpy, verify


def test_identical_output_is_ok():
    ref = np.array([[1.0, -2.0, 3.0]])
    v = verify(torch.tensor(ref), ref, 1e-4)
    assert v.ok and v.max_abs_err == 0 and v.max_rel_err == 0


def test_relative_error_is_scaled_by_the_reference_max():
    ref = np.array([[10.0, -20.0]])
    v = verify(ref + np.array([[0.0, 0.02]]), ref, 1e-4)
    assert math.isclose(v.max_abs_err, 0.02, rel_tol=1e-9)
    assert math.isclose(v.max_rel_err, 0.02 / 20, rel_tol=1e-9)
    assert not v.ok


def test_shape_mismatch_and_nan_are_wrong():
    ref = np.zeros((2, 3))
    assert not verify(np.zeros((3, 2)), ref, 1).ok
    assert not verify(np.full((2, 3), np.nan), ref, 1).ok


def test_to_numpy_accepts_what_backends_return():
    t = torch.ones(2, 2, dtype=torch.bfloat16)
    for out in (t, [t], t.float().numpy(), {"output": t}):
        assert to_numpy(out).dtype == np.float64
