"""Live progress for long runs: done/total, ETA, the current cell, the last result."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from stackcost.cell import Cell
from stackcost.report.marks import DISTURBED_MARK, STATUS_STYLE
from stackcost.report.units import ms
from stackcost.result import MEASURED_STATUSES, RepetitionResult, headline


class LiveProgress:
    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.progress = Progress(
            # Not markup: a cell label (a user's model name) may hold '['.
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("repetitions"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=not enabled,
            transient=True,
        )
        self.task = self.progress.add_task("starting", total=None)
        self.enabled = enabled

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start(self, cell: Cell, repetition: int) -> None:
        self.progress.update(self.task, description=f"{cell.label()} #{repetition}")

    def result(self, cell: Cell, result: RepetitionResult, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total)
        if not self.enabled:
            return
        line = Text.assemble((f"{done}/{total}", "dim"), f" {cell.label()}: ")
        line.append(result.status, style=STATUS_STYLE.get(result.status, "red"))
        if result.stats and result.status in MEASURED_STATUSES:
            mark = DISTURBED_MARK if result.status == "disturbed" else ""
            line.append(f" {ms(result.stats.median_ms)}{mark}")
        if result.reason:  # whole: the console wraps it; the store keeps every line
            line.append(f" {headline(result.reason)}", style="dim")
        self.console.print(line)
