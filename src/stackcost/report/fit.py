"""Terminal tables that fit the terminal, their numbers never cut.

Rich squeezes a table wider than the console into its columns and ends a number that no
longer fits with an ellipsis ('54,0…'). `fit` hides a table's least important columns
instead, until every number fits whole, and says under the table which it hid. A column
aligned right holds numbers (every table here aligns numbers right and text left): it keeps
its widest cell and only its heading wraps, unless nothing is left to hide; then its cells
wrap at their spaces, never inside a number. Text (names, reasons) wraps or folds.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

WIDE = 100_000  # the width a table is measured at unconstrained
TEXT_FLOOR = 16  # a text column narrows to its longest word, this many cells at most


def heading(column: Column) -> str:
    """A column's heading on one line, as `drop` names it: 'resolution (px)'."""
    header = column.header
    if isinstance(header, str):  # as rich prints it: markup
        header = Text.from_markup(header)
    plain = header.plain if isinstance(header, Text) else str(header)
    return " ".join(plain.split())


def is_number(column: Column) -> bool:
    return column.justify == "right"


def _span(console: Console, options: ConsoleOptions, column: Column) -> tuple[int, int, int]:
    """(least, narrow, natural) width of a column's content. A number column is narrow at
    its widest cell, its heading wrapped at word breaks, and least when its cells wrap too,
    at spaces ('12.3 ms ±' over '0.4%'), each number whole. A text column is narrow at its
    longest word (at most TEXT_FLOOR: a path or a digest folds), or its natural width when
    it is no_wrap."""
    cells = [Measurement.get(console, options, c) for c in column.cells]
    head = Measurement.get(console, options, column.header)
    natural = max([head.maximum, *(m.maximum for m in cells)])
    if column.max_width is not None:
        natural = min(natural, column.max_width)
    if is_number(column):
        narrow = max([head.minimum, *(m.maximum for m in cells)])
        least = max([head.minimum, *(m.minimum for m in cells)])
        return least, narrow, max(natural, narrow)
    if column.no_wrap:
        return natural, natural, natural
    narrow = min(max([head.minimum, *(m.minimum for m in cells)]), TEXT_FLOOR, natural)
    return narrow, narrow, natural


def _laid_out(
    table: Table, columns: list[Column], widths: Sequence[int | None], note: str = ""
) -> Table:
    """A copy of `table` with only `columns`, each `widths` wide (None: as rich divides
    what is left; a cell too wide folds onto a next line, never ends in '…'), `note`
    under it."""
    out = copy.copy(table)
    # Rich tells the first and the last column by their position in the table.
    out.columns = [dataclasses.replace(c, _index=i) for i, c in enumerate(columns)]
    for c, w in zip(out.columns, widths, strict=True):
        c.overflow, c.no_wrap, c.width = "fold", False, w
    if note:
        caption = table.caption
        out.caption = Text(note, style="yellow")
        if caption is not None:
            caption = Text.from_markup(caption) if isinstance(caption, str) else caption
            out.caption = Text.assemble(out.caption, "\n", caption)
    return out


def fit(
    table: Table, console: Console, width: int, drop: Sequence[str] = (), hint: str = ""
) -> Table:
    """`table` as it prints within `width` cells, every number whole: itself when it fits,
    else a copy narrowed (headings wrap first, then text) and, while that is not enough,
    without the columns named in `drop` (least important first), a note under it naming
    them; `hint` ends the note (where to read them). With nothing left to hide, number
    cells wrap at their spaces, and only then does rich divide what is left among the
    text, which folds."""
    wide = console.options.update_width(WIDE)
    columns = list(table.columns)
    spans = {id(c): _span(console, wide, c) for c in columns}

    def total(cols: list[Column], which: int) -> int:
        """The table's width with these columns, each at its least (0), narrow (1) or
        natural (2) width."""
        trial = _laid_out(table, cols, [spans[id(c)][which] for c in cols])
        return Table.__rich_measure__(trial, console, wide).maximum

    if total(columns, 2) <= width:
        return table
    hidden: list[str] = []
    for name in drop:
        if total(columns, 1) <= width:
            break
        for c in [c for c in columns if heading(c) == name]:
            columns.remove(c)
            hidden.append(name)
    names = ", ".join(hidden)
    note = f"hidden at {width} columns: {names}; widen the terminal{hint}" if hidden else ""
    if total(columns, 0) > width:  # numbers at their least, rich divides the rest
        least = [spans[id(c)][0] if is_number(c) else None for c in columns]
        return _laid_out(table, columns, least, note)
    widths = [spans[id(c)][2] for c in columns]
    excess = total(columns, 2) - width
    numbers = [i for i, c in enumerate(columns) if is_number(c)]
    # Headings wrap first (one line more for the table, not one per row), then text, and
    # number cells only when that is not enough.
    for group, which in ((numbers, 1), (range(len(columns)), 1), (numbers, 0)):
        while excess > 0:
            slack = [i for i in group if widths[i] > spans[id(columns[i])][which]]
            if not slack:
                break
            widths[max(slack, key=lambda i: widths[i])] -= 1  # the widest gives first
            excess -= 1
    return _laid_out(table, columns, widths, note)


class FitTable(Table):
    """A rich Table that fits the width it is printed at (`fit`), hiding the columns named
    in `drop`, least important first, only as far as it must; `hint` as `fit`'s."""

    def __init__(
        self, *headers: Any, drop: Sequence[str] = (), hint: str = "", **kwargs: Any
    ) -> None:
        super().__init__(*headers, **kwargs)
        self.drop, self.hint = tuple(drop), hint

    def fitted(self, console: Console, width: int) -> Table:
        return fit(self, console, width, self.drop, self.hint)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from Table.__rich_console__(self.fitted(console, options.max_width), console, options)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Table.__rich_measure__(self.fitted(console, options.max_width), console, options)
