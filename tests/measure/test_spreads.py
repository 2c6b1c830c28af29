"""Where a cell's time varies (issue 62, item 1): between windows of one process and between
processes, from each repetition's samples in timed order (measure.stats.spreads)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stackcost.measure.stats import WINDOWS, spreads


def _process(rng: np.random.Generator, centre: float, n: int = 400, noise: float = 0.02):
    return (centre * (1 + noise * rng.standard_normal(n))).astype(np.int64).tolist()


def test_a_planted_per_process_bias_is_reported_as_between_processes():
    rng = np.random.default_rng(0)
    biased = [_process(rng, 1e6 * (1 + b)) for b in (-0.08, 0.0, 0.06, 0.12, -0.04, 0.02)]
    found = spreads(biased)
    assert found.processes == 6 and found.windows == WINDOWS
    assert found.between == pytest.approx(
        np.std([0.92, 1, 1.06, 1.12, 0.96, 1.02], ddof=1) / 1.0233, rel=0.1
    )
    assert found.within < 0.01 and found.between_dominates


def test_identical_processes_differ_only_by_their_own_noise():
    rng = np.random.default_rng(1)
    same = [_process(rng, 1e6, noise=0.05) for _ in range(8)]
    found = spreads(same)
    assert found.within is not None and found.between is not None
    # A process's median pools its windows: between ~ within / sqrt(windows)
    assert found.between < 2 * found.within / math.sqrt(WINDOWS)
    assert not found.between_dominates


def test_a_drift_inside_each_process_is_within():
    ramp = [np.linspace(1e6, 1.3e6, 400).astype(np.int64).tolist() for _ in range(3)]
    found = spreads(ramp)
    assert found.within > 0.05 and found.between == pytest.approx(0.0, abs=1e-9)


def test_too_few_samples_or_processes_say_nothing():
    assert spreads([[100] * 5]).between is None  # one process
    assert spreads([[100, 101], [102, 103]]).within is None  # windows of one sample


def test_every_view_shows_spreads_the_same_way():
    from stackcost.measure.stats import Spreads

    biased = Spreads(within=0.012, between=0.074, processes=4)
    assert biased.shown() == "1.2% / 7.4% !"
    assert Spreads(within=None, between=0.02, processes=2).shown() == "— / 2.0%"
