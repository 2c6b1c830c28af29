"""The leak check on synthetic RSS traces."""

from __future__ import annotations

import numpy as np

from stackcost.measure.leak import check_leak

RSS = 300 * 2**20


def trace(per_iter: float, noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    iters = [int(100 * 1.3**k) for k in range(12)]
    return iters, [int(RSS + per_iter * i + rng.normal(0, noise)) for i in iters]


def test_steady_growth_is_a_leak():
    res = check_leak(*trace(4096, noise=20_000))
    assert res is not None and res["leak"] and 3000 < res["bytes_per_iter"] < 5000


def test_flat_noisy_and_harness_growth_are_not():
    assert not check_leak(*trace(0, noise=50_000))["leak"]
    assert not check_leak(*trace(36))["leak"]  # what keeping the samples costs


def test_one_off_jump_is_not_a_leak():
    iters, rss = trace(0)
    rss = [r + (8 * 2**20 if k == 5 else 0) for k, r in enumerate(rss)]  # one transient spike
    assert not check_leak(iters, rss)["leak"]


def test_too_few_points():
    assert check_leak([1, 2, 3], [1, 2, 3]) is None
