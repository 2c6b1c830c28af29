"""Every scenario by name: the one table the worker reads, so it never asks which
scenario it holds. Adding a scenario is its module and one line here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stackcost.cell import GENERATE
from stackcost.scenarios.base import Scenario
from stackcost.scenarios.generate import Generate
from stackcost.scenarios.loadgen import LoadGen
from stackcost.scenarios.serve import Serve
from stackcost.scenarios.settings import KINDS, SERVE, TIMED_LOOP
from stackcost.scenarios.timed_loop import TimedLoop
from stackcost.scenarios.token_serving import TokenServing
from stackcost.scenarios.train import TRAIN, Training

if TYPE_CHECKING:
    from stackcost.cell import Cell

SCENARIOS: dict[str, Scenario] = {
    TIMED_LOOP: TimedLoop(),
    **{name: LoadGen(kind) for name, kind in KINDS.items()},  # one per LoadGen scenario
    TRAIN: Training(),
    GENERATE: Generate(),
    SERVE: Serve(),  # mode generate under a request-rate sweep (a cell with `serve`)
}
# Token generation served under LoadGen (mode generate with a Server or Offline config).
TOKEN_SERVING: dict[str, Scenario] = {name: TokenServing(kind) for name, kind in KINDS.items()}


def scenario_of(cell: Cell) -> Scenario:
    """The scenario a cell names: training and generation by its mode (generation under
    LoadGen by its config too), a LoadGen scenario by its config, otherwise the timed loop."""
    if cell.mode == GENERATE and cell.serve is not None:
        return SCENARIOS[SERVE]
    if cell.mode == GENERATE and cell.scenario is not None:
        return TOKEN_SERVING[cell.scenario.name]
    if cell.mode in (TRAIN, GENERATE):
        return SCENARIOS[cell.mode]
    return SCENARIOS[cell.scenario.name if cell.scenario is not None else TIMED_LOOP]
