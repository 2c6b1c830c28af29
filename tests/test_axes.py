"""The grid's axes are one table: every place that names an axis reads it from there."""

from __future__ import annotations

import argparse

from stackcost.axes import GRID_AXES, GRID_COLUMNS, PRECISION_TOLERANCE, PRECISIONS
from stackcost.cell import Cell, ModelRef
from stackcost.commands.axes import add_axis_args
from stackcost.report.frames import tidy
from stackcost.runspec.file import SweepFile
from stackcost.runspec.run import RunSpec
from stackcost.store.database import CELL_COLUMNS
from stackcost.verify import DEFAULT_TOLERANCE


def test_every_grid_axis_is_a_spec_key_a_flag_a_cell_field_and_a_column():
    parser = argparse.ArgumentParser()
    add_axis_args(parser, defaults=True)
    flags = {flag for action in parser._actions for flag in action.option_strings}
    cell = Cell(model=ModelRef(name="mlp"), backend="eager")
    for axis in GRID_AXES.values():
        assert axis.plural in RunSpec.model_fields and axis.plural in SweepFile.model_fields
        assert axis.flag in flags
        assert axis.name in Cell.model_fields and axis.name in cell.flat()
        assert axis.name in CELL_COLUMNS
        assert axis.name in tidy.WORKLOAD_AXES and axis.name in tidy.CELL_COLUMNS
    assert [c for c in cell.flat() if c in GRID_AXES] == list(GRID_COLUMNS)


def test_a_precision_is_declared_with_its_tolerance():
    assert PRECISIONS == tuple(PRECISION_TOLERANCE) == tuple(DEFAULT_TOLERANCE)
