"""The paired API (stackcost.api.paired): designs, fields and refusals, without workers."""

from __future__ import annotations

import pytest

from stackcost.api import paired
from stackcost.compare.bisect import BisectError
from stackcost.errors import SpecError


def test_a_design_takes_its_pacings_block_counts_and_the_gates_allocator():
    bursts = paired.ab_design()
    assert (bursts.pacing, bursts.min_blocks, bursts.max_blocks) == ("bursts", 6, 20)
    assert bursts.allocator == paired.GATE_ALLOCATOR == "steady"
    processes = paired.ab_design(pacing="processes", max_blocks=9)
    assert (processes.min_blocks, processes.max_blocks) == (paired.BLOCKS["processes"][0], 9)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"pacing": "sideways"}, "--pacing 'sideways': allowed: bursts, processes"),
        ({"max_blocks": 2000}, "--max-blocks 2000 is more than 1000"),
        ({"min_blocks": 9, "max_blocks": 8}, "--min-blocks 9 is more than --max-blocks 8"),
        ({"min_blocks": 1}, "--min-blocks 1 must be greater than 1"),
        ({"threshold": 5.0}, "--threshold"),
        ({"burst_ms": float("nan")}, "--burst-ms"),
    ],
)
def test_a_design_out_of_range_is_refused(kwargs, needle):
    with pytest.raises(SpecError, match=needle):
        paired.ab_design(**kwargs)


def test_ab_fields_refuse_runs_repetition_rules_and_fill_in_the_gate():
    fields = paired.ab_fields({"backends": "all"})
    assert fields["allocator"] == "steady" and "eager" in fields["backends"]
    assert paired.ab_fields({"allocator": "glibc"})["allocator"] == "glibc"
    with pytest.raises(SpecError, match="--repeats 3 does not apply to ab"):
        paired.ab_fields({"repeats": 3})
    with pytest.raises(SpecError, match="run's stop rule; ab measures blocks"):
        paired.ab_fields({"cell_ci": 0.02})
    with pytest.raises(SpecError, match="is not a policy"):
        paired.check_policy("sometimes")


def test_a_bisection_measures_one_cell():
    spec = paired.cell_spec({"backends": ["eager"], "threads": [1]}, "mlp")
    assert len(spec.cells()) == 1 and spec.allocator == "steady"
    with pytest.raises(SpecError, match="cell mode measures one cell, and these flags make 2"):
        paired.cell_spec({"backends": ["eager", "onnxruntime"], "threads": [1]}, "mlp")
    with pytest.raises(SpecError, match="not bisect's"):
        paired.cell_fields({"max_repeats": 4})


def test_a_commit_that_does_not_install_is_skipped_and_said(tmp_path, monkeypatch):
    import stackcost.execute.sides as sides

    def broken(name, where, *args, **kwargs):
        raise SpecError(f"--{name} {where}: does not install")

    monkeypatch.setattr(sides, "resolve", broken)
    spec = paired.cell_spec({"backends": ["eager"], "threads": [1]}, "mlp")
    notices: list[str] = []
    with pytest.raises(BisectError, match="cannot measure the endpoints"):
        paired.bisect(["a" * 40, "b" * 40], spec, db=tmp_path / "b.db", on_notice=notices.append)
    assert notices == [f"{'b' * 12}: --base git:{'a' * 40}: does not install"]
    assert not (tmp_path / "b.db").exists()


def test_flagged_cells_are_the_ones_a_gate_names():
    from stackcost.execute.interleave import ABResult, CellPair

    spec = paired.cell_spec({"backends": ["eager"], "threads": [1]}, "mlp")
    (cell,) = spec.cells()
    broke = CellPair(base=cell, cand=cell, failed={"cand": "error: x"})
    fixed = CellPair(base=cell, cand=cell, failed={"base": "error: x"})
    unmeasured = CellPair(base=cell, cand=cell)
    result = ABResult("p", {}, {}, paired.ab_design(), [broke, fixed, unmeasured])
    assert [c.verdict for c in paired.flagged(result)] == ["newly failing", "undecided"]
