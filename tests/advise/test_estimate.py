from dataclasses import replace

from stackcost.advise.constraints import Constraints
from stackcost.advise.estimate import ESTIMATED, interpolated
from stackcost.advise.evidence import Evidence
from stackcost.advise.search import estimates, most_threads, screen
from stackcost.cell import Cell, ModelRef


def measured(batch, median_ms, *, threads=2, backend="onnxruntime", memory=100, sizes=None):
    return Evidence(
        key=f"{backend}-b{batch}-t{threads}", backend=backend, precision="fp32",
        batch_size=batch, threads=threads, sizes=sizes or {}, status="ok", repetitions=1,
        median_ms=median_ms, tail_ms=median_ms * 1.1, throughput=batch * 1000 / median_ms,
        memory_bytes=memory,
    )  # fmt: skip


def test_a_middle_batch_is_linear_between_the_ends_and_says_it_is_estimated():
    e = interpolated(measured(1, 10.0, memory=100), measured(16, 70.0, memory=400), "k", 6)
    assert e is not None and e.status == ESTIMATED and e.repetitions == 0
    assert e.median_ms == 30.0 and e.memory_bytes == 200  # a third of the way
    assert e.throughput == 6 * 1000 / 30.0
    assert "between b1 and b16" in e.reason
    # outside the ends, or with an end that has no median, nothing is estimated
    assert interpolated(measured(1, 10.0), measured(16, 70.0), "k", 16) is None
    no_median = replace(measured(16, 70.0), median_ms=None)
    assert interpolated(measured(1, 10.0), no_median, "k", 8) is None


def cells(batches, threads=2, backend="onnxruntime"):
    model = ModelRef(name="mlp")
    return [
        Cell(model=model, backend=backend, batch_size=b, threads=threads, resolution=8)
        for b in batches
    ]


def test_estimates_only_between_usable_ends_of_the_same_threads():
    middle, beyond, one_thread = cells([4]), cells([16]), cells([4], threads=1)
    sizes = dict(middle[0].sizes)
    evidence = [measured(1, 10.0, sizes=sizes), measured(8, 50.0, sizes=sizes)]
    found = estimates(evidence, middle + beyond + one_thread)
    assert list(found) == [middle[0].key()]
    assert found[middle[0].key()].median_ms == 10.0 + 40.0 * 3 / 7


def test_an_estimate_prunes_but_never_sets_the_best():
    fast_guess = replace(measured(4, 1.0), key="guess", status=ESTIMATED)
    decided = screen([measured(1, 10.0), fast_guess], Constraints(), "latency", margin=0.25)
    assert decided["onnxruntime-b1-t2"].kept  # not dominated by a guess 10x faster
    slow_guess = replace(measured(4, 40.0), key="slow", status=ESTIMATED)
    decided = screen([measured(1, 10.0), slow_guess], Constraints(), "latency", margin=0.25)
    assert not decided["slow"].kept and "4× the latency" in decided["slow"].why


def test_the_sibling_at_the_most_threads_is_the_one_kept():
    one, two = measured(4, 20.0, threads=1), measured(4, 12.0, threads=2)
    assert list(most_threads([one, two]).values()) == [two]
