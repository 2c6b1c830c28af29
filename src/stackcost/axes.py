"""The grid's axes beside the batch and the model's own sizes (precision, threads, device),
declared once, as data.

Each row says what the cell field, the store and table column, the spec's (and YAML's) key,
the command-line flag, the allowed values and a report's label of the axis are; the cell,
the spec validators, the flags, the store's columns and the report's lists read them from
here. Adding a precision is one entry in PRECISION_TOLERANCE. Imports nothing of stackcost:
the cell itself reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Every precision a cell can ask for, with the relative output tolerance it is verified to
# against eager fp32 (max|out - ref| / max|ref|): bf16 keeps 8 mantissa bits, fp16 11.
PRECISION_TOLERANCE: dict[str, float] = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2}


@dataclass(frozen=True)
class GridAxis:
    """One axis of the grid: its names everywhere, what it allows, how a report shows it."""

    name: str  # the Cell field, store and table column, and refusal wording: "precision"
    plural: str  # the RunSpec field and YAML key: "precisions"
    values: tuple[str, ...] | None  # the allowed values; None: a positive count (threads)
    default: str | None  # a choice axis' default; a count's is the machine's (cores)
    label: str  # a report's name for one value, a format: "{} thr"
    tag: str  # the one-line cell label's, a format: "t{}"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def help(self) -> str:
        """The flag's help, from its values."""
        return f"comma list of {', '.join(self.values or ())}"


GRID_AXES: dict[str, GridAxis] = {
    a.name: a
    for a in (
        GridAxis("precision", "precisions", tuple(PRECISION_TOLERANCE), "fp32", "{}", "{}"),
        GridAxis("threads", "threads", None, None, "{} thr", "t{}"),
        GridAxis("device", "devices", ("cpu", "cuda"), "cpu", "{}", "{}"),
    )
}
# In the cell's, the store's and the tables' order.
GRID_COLUMNS: tuple[str, ...] = tuple(GRID_AXES)
# The choice axes (a list of allowed values) and the count axes (positive integers).
CHOICE_AXES: tuple[GridAxis, ...] = tuple(a for a in GRID_AXES.values() if a.values)
COUNT_AXES: tuple[GridAxis, ...] = tuple(a for a in GRID_AXES.values() if not a.values)

PRECISIONS: tuple[str, ...] = GRID_AXES["precision"].values or ()
DEVICES: tuple[str, ...] = GRID_AXES["device"].values or ()
