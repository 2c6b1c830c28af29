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

from stackcost.cell import Cell
from stackcost.report.units import ms
from stackcost.result import RepetitionResult


class LiveProgress:
    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
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
        median = ms(result.stats.median_ms) if result.stats and result.valid else ""
        note = result.reason[:80] if result.reason else ""
        self.console.print(
            f"[dim]{done}/{total}[/] {cell.label()}: {result.status} {median} {note}"
        )
