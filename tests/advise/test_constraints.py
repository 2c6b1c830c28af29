import pytest

from stackcost.advise.constraints import (
    Constraints,
    check_objective,
    parse_budget_s,
    parse_memory_bytes,
    violations,
)
from stackcost.errors import SpecError


def test_a_bound_is_broken_only_beyond_the_margin():
    bounds = Constraints(latency_bound_ms=20, min_throughput=100, max_memory_bytes=2**30)
    assert violations(24.0, 90.0, 2**30, bounds, margin=0.25) == []
    broken = violations(26.0, 70.0, 2**31, bounds, margin=0.25)
    assert [b.split()[0] for b in broken] == ["p99", "70", "peak"], broken
    assert violations(20.5, None, None, bounds) == ["p99 20.5 ms > 20 ms"]


def test_figures_not_measured_break_nothing_and_no_bounds_say_so():
    assert violations(None, None, None, Constraints(latency_bound_ms=1)) == []
    assert Constraints().words() == "no bounds"
    assert "p90 ≤ 5 ms" in Constraints(latency_bound_ms=5, percentile="p90").words()


@pytest.mark.parametrize(
    "make",
    [
        lambda: Constraints(percentile="p95"),
        lambda: Constraints(latency_bound_ms=0),
        lambda: Constraints(min_throughput=-1),
        lambda: check_objective("speed"),
        lambda: parse_budget_s("20"),
        lambda: parse_budget_s("0m"),
        lambda: parse_budget_s("2d"),
        lambda: parse_memory_bytes("2G"),
        lambda: parse_memory_bytes("0MiB"),
    ],
)
def test_bad_values_are_refused_in_one_line(make):
    with pytest.raises(SpecError) as error:
        make()
    assert "\n" not in str(error.value)


def test_budgets_and_sizes_read_with_their_units():
    assert parse_budget_s("20m") == 1200 and parse_budget_s("90s") == 90
    assert parse_budget_s("1.5h") == 5400
    assert parse_memory_bytes("512MiB") == 512 * 2**20 and parse_memory_bytes("1GB") == 10**9
