from stackcost.advise.constraints import Constraints
from stackcost.advise.evidence import Evidence
from stackcost.advise.search import eligible, finalists, ranked, screen, too_close


def cell(name, median_ms, *, status="ok", batch=1, tail=None, memory=100 * 2**20, interval=None):
    return Evidence(
        key=name,
        backend=name,
        precision="fp32",
        batch_size=batch,
        threads=1,
        sizes={},
        status=status,
        reason="" if status == "ok" else "because",
        repetitions=1,
        median_ms=median_ms if status in ("ok", "unstable") else None,
        tail_ms=tail if tail is not None else median_ms,
        throughput=batch * 1000 / median_ms if median_ms else None,
        memory_bytes=memory,
        interval=interval,
    )


def test_screening_prunes_the_clearly_worse_and_keeps_what_the_margin_covers():
    cells = [cell("a", 10.0), cell("b", 12.0), cell("c", 14.0), cell("w", 1.0, status="wrong")]
    decided = screen(cells, Constraints(), "latency", margin=0.25)
    assert decided["a"].kept and decided["b"].kept  # b is 20% behind: within the margin
    assert not decided["c"].kept and "1.4× the latency of a" in decided["c"].why
    assert not decided["w"].kept and decided["w"].why.startswith("wrong")


def test_a_bound_prunes_only_beyond_the_margin_while_screening():
    bounds = Constraints(latency_bound_ms=10)
    cells = [cell("ok", 7.0), cell("near", 8.0, tail=12.0), cell("far", 7.5, tail=13.0)]
    decided = screen(cells, bounds, "latency", margin=0.25)
    assert decided["near"].kept  # 12 ms is within 25% of the 10 ms bound
    assert not decided["far"].kept and decided["far"].why.startswith("breaks p99 13 ms")


def test_throughput_ranks_by_samples_per_second_across_batch_sizes():
    cells = [cell("b1", 1.0), cell("b8", 4.0, batch=8)]  # 1000/s against 2000/s
    decided = screen(cells, Constraints(), "throughput", margin=0.25)
    assert decided["b8"].kept and not decided["b1"].kept
    # finalists: the kept first, then one beyond the margin as a fallback
    assert [e.key for e in finalists(cells, decided, "throughput", 3)] == ["b8", "b1"]
    assert [e.key for e in finalists(cells, decided, "throughput", 1)] == ["b8"]
    assert [e.key for e in ranked(cells, "throughput")] == ["b8", "b1"]


def test_only_ok_evidence_that_meets_the_bounds_may_be_recommended():
    cells = [cell("ok", 5.0), cell("shaky", 4.0, status="unstable"), cell("slow", 30.0)]
    fitness = eligible(cells, Constraints(latency_bound_ms=20))
    assert fitness["ok"] == ""
    assert fitness["shaky"].startswith("unstable")
    assert fitness["slow"].startswith("breaks")


def test_two_finalists_are_too_close_within_the_threshold_or_overlapping_intervals():
    a, b = cell("a", 10.0, interval=(9.8, 10.2)), cell("b", 10.2, interval=(10.0, 10.4))
    assert too_close(a, b, "latency", 0.03)  # 2% apart
    far = cell("c", 11.0, interval=(10.9, 11.1))
    assert not too_close(a, far, "latency", 0.03)  # 10% apart, intervals apart
    wide = cell("d", 11.0, interval=(9.0, 13.0))
    assert too_close(a, wide, "latency", 0.03)  # 10% apart, but the intervals overlap
    # memory does not drift: 2x apart is apart, whatever the latency intervals say
    assert not too_close(cell("m", 1.0, memory=100), cell("n", 1.0, memory=200), "memory", 0.03)


def test_the_coarse_pass_takes_each_rung_and_precision_at_its_batch_ends_and_most_threads():
    from stackcost.advise.search import coarse
    from stackcost.runspec.run import model_ref, validate

    spec = validate(
        {
            "models": [model_ref("mlp")],
            "backends": ["eager", "onnxruntime"],
            "precisions": ["fp32"],
            "batch_sizes": [1, 4, 16],
            "threads": [1],  # a test lane may own one core: the 2-thread cells are copies
        }
    )
    cells = spec.cells() + [c.model_copy(update={"threads": 2}) for c in spec.cells()]
    first, rest = coarse(cells)
    assert sorted((c.backend, c.batch_size, c.threads) for c in first) == [
        ("eager", 1, 2), ("eager", 16, 2), ("onnxruntime", 1, 2), ("onnxruntime", 16, 2),
    ]  # fmt: skip
    assert len(rest) == 12 - 4 and not {c.key() for c in first} & {c.key() for c in rest}


def test_a_pair_is_promising_when_the_coarse_pass_kept_one_of_its_cells():
    from stackcost.advise.search import promising

    cells = [cell("a", 10.0), cell("b", 100.0)]
    decided = screen(cells, Constraints(), "latency", margin=0.25)
    assert promising(cells, decided) == {("a", "fp32")}


def test_a_pair_pruned_only_for_a_bound_at_its_ends_is_still_worth_its_middle():
    from stackcost.advise.search import pair_order, promising

    bounds = Constraints(latency_bound_ms=20)
    # b16 breaks the bound, b1 trails on throughput: b4 may meet the bound and lead.
    cells = [cell("x1", 5.0), cell("x16", 60.0, batch=16), cell("y16", 10.0, batch=16)]
    cells[0] = Evidence(**{**cells[0].__dict__, "key": "x1", "backend": "x"})
    cells[1] = Evidence(**{**cells[1].__dict__, "key": "x16", "backend": "x"})
    cells[2] = Evidence(**{**cells[2].__dict__, "key": "y16", "backend": "y"})
    decided = screen(cells, bounds, "throughput", margin=0.25)
    assert decided["x16"].bound and not decided["x1"].kept
    assert promising(cells, decided) == {("x", "fp32"), ("y", "fp32")}
    assert list(pair_order(cells, "throughput")) == [("y", "fp32"), ("x", "fp32")]


def test_a_cell_whose_processes_differ_may_be_recommended_once_enough_were_measured():
    from dataclasses import replace

    varies = replace(cell("v", 5.0, status="unstable"), between_processes=True, repetitions=10)
    capped = replace(cell("c", 5.0, status="unstable"), repetitions=10)  # time cap: not this
    few = replace(varies, key="few", repetitions=3)
    fitness = eligible([varies, capped, few], Constraints(), enough=10)
    assert fitness["v"] == ""
    assert fitness["c"].startswith("unstable") and fitness["few"].startswith("unstable")
    assert eligible([varies], Constraints())["v"].startswith("unstable")  # not asked: no


def test_a_served_cell_is_judged_by_the_ceiling_its_coarse_sweep_leaves():
    from dataclasses import replace

    best = cell("best", 1000 / 470)  # held 470 requests/s
    low = cell("low", 1000 / 250)  # held 250, but did not fail below 400
    reaching = replace(low, key="reaching", ceiling=400.0)
    decided = screen([best, low, reaching], Constraints(), "throughput", margin=0.25)
    assert not decided["low"].kept and "may hold" not in decided["low"].why
    assert decided["reaching"].kept  # 400 is within 25% of 470
    far = replace(low, key="far", ceiling=300.0)
    why = screen([best, far], Constraints(), "throughput", margin=0.25)["far"].why
    assert "0.532× the throughput of best fp32 b1 t1; it may hold up to 0.638×" in why
    # Finalists are taken by what they could reach: the ceiling ranks above a held 260.
    third = cell("third", 1000 / 260)
    order = finalists([best, third, reaching], screen([best, third, reaching], Constraints(),
                      "throughput", 0.25), "throughput", 2)  # fmt: skip
    assert [e.key for e in order] == ["best", "reaching"]
