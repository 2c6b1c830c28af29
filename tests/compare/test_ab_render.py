"""An A/B that decided nothing never reads as a pass: headline, markdown, JSON, exit code.

Built in memory from block ratios (no measurement): the verdicts come from the real
sequential rule (measure/paired.py), so a test fails if the rule or the rendering moves.
"""

from __future__ import annotations

import json
import math

import pytest

from stackcost.cell import Cell
from stackcost.commands.ab import EXIT_UNDECIDED, exit_code
from stackcost.compare import ab_render
from stackcost.compare.ab_render import as_json, design_line, markdown, summary_line
from stackcost.execute.interleave import ABResult, CellPair, Design
from stackcost.execute.sides import Side
from stackcost.measure.paired import decide
from stackcost.runspec.run import model_ref

DESIGN = Design(min_blocks=2, max_blocks=4)
# Block ratios (cand / base) that the rule decides each way at the cap of 4 blocks.
CLEAR = [1.001, 0.999, 1.0, 1.0005]  # tight around 1: unchanged
SPREAD = [0.90, 1.12, 0.93, 1.09]  # ±10% between blocks: the interval straddles ±3%
SLOWER = [1.20, 1.21, 1.19, 1.20]  # 20% slower, tightly: regressed


def pair(batch: int, ratios: list[float]) -> CellPair:
    cell = Cell(model=model_ref("mlp"), backend="eager", batch_size=batch, threads=1)
    logs = [math.log(r) for r in ratios]
    p = CellPair(cell, cell, blocks=[([1.0], [r]) for r in ratios], estimates=logs)
    p.result = decide(logs, **DESIGN.rule(), last=True)
    return p


def ab_of(*cells: CellPair) -> ABResult:
    sides = {"base": Side("base"), "cand": Side("cand")}
    return ABResult("p1", {"base": "r1", "cand": "r2"}, sides, DESIGN, list(cells), blocks=4)


def test_the_rule_decides_the_fixture_ratios_as_named():
    assert [pair(1, r).verdict for r in (CLEAR, SPREAD, SLOWER)] == [
        "unchanged",
        "noisy",
        "regressed",
    ]


def test_a_noisy_cell_makes_the_gate_undecided_first_in_every_rendering():
    ab = ab_of(pair(1, CLEAR), pair(8, SPREAD), pair(16, SPREAD))
    assert ab.outcome == "undecided" and not ab.failed
    assert summary_line(ab) == "undecided: 2 cells noisy (1 unchanged, 2 noisy)"
    # Counts the headline already gives are not said twice.
    assert summary_line(ab_of(pair(8, SPREAD))) == "undecided: 1 cell noisy"
    md = markdown(ab)
    assert md.startswith("🟡 **Undecided: 2 cells noisy, not a pass**")
    assert "No performance regression" not in md and "--on-undecided" in md
    data = json.loads(as_json(ab))
    assert list(data)[:2] == ["outcome", "headline"]
    assert data["outcome"] == "undecided" and data["headline"] == "undecided: 2 cells noisy"


def test_a_regression_outranks_an_undecided_cell():
    ab = ab_of(pair(1, SLOWER), pair(8, SPREAD))
    assert ab.outcome == "regressed"
    assert markdown(ab).startswith("❌ **Performance regression**")
    assert summary_line(ab).startswith("regressed: 1 cell worse")


def test_only_decided_cells_without_a_regression_pass():
    ab = ab_of(pair(1, CLEAR), pair(8, CLEAR))
    assert ab.outcome == "passed" and summary_line(ab).startswith("no regression")
    assert markdown(ab).startswith("✅ **No performance regression**")


@pytest.mark.parametrize(
    ("outcome", "on_undecided", "code"),
    [
        ("passed", None, 0),
        ("regressed", None, 1),
        ("regressed", "pass", 1),  # --on-undecided never hides a regression
        ("undecided", None, EXIT_UNDECIDED),
        ("undecided", "pass", 0),
        ("undecided", "fail", 1),
    ],
)
def test_the_exit_code_tells_undecided_from_pass_unless_the_job_chooses(
    outcome, on_undecided, code
):
    assert exit_code(outcome, on_undecided) == code
    assert EXIT_UNDECIDED not in (0, 1, 2)  # 2 is bad input


def _bursts(backend: str, threads: int) -> CellPair:
    cell = Cell(model=model_ref("mlp"), backend=backend, batch_size=1, threads=threads)
    return CellPair(cell, cell, design="bursts")


def test_the_design_line_says_threads_were_bound_only_for_cells_that_were():
    bursts = Design(pacing="bursts", bind_threads=True)
    sides = {"base": Side("base"), "cand": Side("cand")}

    def line(*cells: CellPair) -> str:
        return design_line(ABResult("p1", {"base": "r1", "cand": "r2"}, sides, bursts, [*cells]))

    assert "bound one per core, bursts" in line(_bursts("eager", 2))
    assert "bound" not in line(_bursts("onnxruntime", 2))  # its own pool, never bound
    assert "bound" not in line(_bursts("eager", 1))
    mixed = line(_bursts("eager", 2), _bursts("onnxruntime", 2))
    assert "bound one per core in mlp" in mixed and "onnxruntime" not in mixed.split("bound")[1]


def test_the_design_line_says_which_cells_ran_both_workers_on_the_same_drawn_cores():
    sides = {"base": Side("base"), "cand": Side("cand")}

    def line(*cells: CellPair) -> str:
        return design_line(ABResult("p1", {"base": "r1", "cand": "r2"}, sides, Design(), [*cells]))

    narrow, wide = _bursts("eager", 1), _bursts("onnxruntime", 2)
    narrow.burst_blocks = [{"cores": [1]}, {"cores": [0]}]
    wide.burst_blocks = [{"cores": None}]  # as wide as the machine: not pinned
    assert "both on the same core(s), drawn per block," in line(narrow)
    assert "same core" not in line(wide)
    assert "same core(s), drawn per block in mlp eager" in line(narrow, wide)


def test_the_gate_says_where_a_noisy_cells_noise_is():
    """Bursts that agree inside each block, blocks that do not: the processes' own bias."""
    cell = Cell(model=model_ref("mlp"), backend="eager", batch_size=1, threads=1)
    blocks = [([b, b * 1.001, b * 0.999], [b * r] * 3) for b, r in zip(
        (1.0, 1.15, 0.9, 1.1), SPREAD, strict=True)]  # fmt: skip
    logs = [math.log(r) for r in SPREAD]
    noisy = CellPair(cell, cell, blocks=blocks, estimates=logs, design="bursts")
    noisy.result = decide(logs, **DESIGN.rule(), last=True)
    spread = noisy.spreads("base")
    assert spread.within < 0.002 and spread.between > 0.1 and spread.between_dominates
    # The ratio's own: its pairs agree inside each block, its blocks do not.
    pairs = noisy.pair_spreads()
    assert pairs is not None and pairs.within < 0.002 and pairs.between_dominates
    assert "its processes differ more than their bursts" in noisy.note()
    ab = ab_of(noisy)
    assert "quieter machine" not in markdown(ab) and "--max-blocks" in markdown(ab)
    assert ab_render._spread(noisy).endswith(f"{pairs.between:.1%} !")  # the table's column
    data = json.loads(as_json(ab))["cells"][0]["spreads"]
    assert data["base"]["between"] == pytest.approx(spread.between)
    assert data["pairs"]["between"] == pytest.approx(pairs.between)
    # The processes design has one value a process: nothing within, the blocks between.
    whole = pair(1, CLEAR).spreads("cand")
    assert whole.within is None and whole.between is not None
