import numpy as np
import pytest
from scipy import stats as sps

from stackcost.measure.stats import median_ci, summarize


@pytest.fixture
def samples_ns() -> np.ndarray:
    return np.random.default_rng(7).lognormal(np.log(2e6), 0.1, 500).astype(np.int64)


def test_summary_matches_numpy_and_scipy(samples_ns):
    s = summarize(samples_ns)
    x = samples_ns / 1e6
    assert s.n == 500
    assert s.median_ms == pytest.approx(np.median(x))
    assert s.mean_ms == pytest.approx(np.mean(x))
    assert s.iqr_ms == pytest.approx(sps.iqr(x))
    assert s.p90_ms == pytest.approx(np.percentile(x, 90))
    assert s.p99_ms == pytest.approx(np.percentile(x, 99))
    assert (s.min_ms, s.max_ms) == (pytest.approx(x.min()), pytest.approx(x.max()))
    assert s.cv == pytest.approx(np.std(x) / np.mean(x))


def test_median_ci_brackets_the_median_by_order_statistics():
    x = np.arange(1, 101, dtype=float)  # known sample: 95% CI of the median is x(40)..x(61)
    low, high = median_ci(x)
    assert (low, high) == (40.0, 61.0)
    assert low <= np.median(x) <= high


@pytest.mark.parametrize("n", [5, 6, 7, 10, 11, 50, 101, 1000, 12345])
def test_median_ci_equals_scipy_quantile_test(n):
    x = np.random.default_rng(n).normal(size=n)
    expected = sps.quantile_test(x, q=np.median(x), p=0.5).confidence_interval(0.95)
    np.testing.assert_equal(median_ci(x), (expected.low, expected.high))


def test_ci_coverage_on_known_distribution():
    rng = np.random.default_rng(0)
    covered = sum(
        lo <= 0.0 <= hi for lo, hi in (median_ci(rng.normal(0, 1, 50)) for _ in range(400))
    )
    assert 0.92 <= covered / 400 <= 0.99


def test_too_few_samples_give_an_infinite_relative_ci():
    s = summarize([1_000_000, 1_100_000, 900_000])
    assert s.ci_half_width_rel == float("inf")


def test_empty_samples_raise():
    with pytest.raises(ValueError):
        summarize([])
