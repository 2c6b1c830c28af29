"""What to run next: the grid minus what is stored, pruned after OOM or timeout, or a
doubling search for the best-throughput batch size.

A plan is fed every result as it lands (`observe`) and decides lazily (`next_cells`),
so the executor's stream and the plan stay in step; a resumed run replays its stored
results through `observe` first. A concurrent executor (Ray) pulls pairs before the
earlier ones are observed: what is yielded counts as running until observed, so no
repetition index is handed out twice, and a doubling search yields None (wait for a
result) while the batch that decides its next step is still running.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from stackcost.cell import Cell
from stackcost.result import RepetitionResult
from stackcost.spec.run import RunSpec

if TYPE_CHECKING:
    from stackcost.spec.train import TrainSpec

# Out of memory or time at batch b: larger batches of the series would be too.
PRUNING_STATUSES = frozenset({"oom", "timeout"})
# A doubling step must beat the best throughput by this much to count as improving.
MIN_GAIN = 0.03
# Consecutive non-improving doublings before the search stops.
PATIENCE = 2


def series_key(cell: Cell) -> str:
    """Everything but the batch size: cells that differ only in batch form a series."""
    return cell.model_copy(update={"batch_size": 0}).key()


class Plan:
    def __init__(self, spec: RunSpec | TrainSpec) -> None:
        self.spec = spec
        self.done: dict[str, int] = defaultdict(int)  # cell key -> completed repetitions
        self.limit: dict[str, tuple[int, str]] = {}  # series -> (smallest failing batch, status)
        self.throughput: dict[str, list[float]] = defaultdict(list)  # cell key -> per rep
        self.running: dict[str, int] = defaultdict(int)  # cell key -> yielded, not observed
        # cell key -> repetition indices stored or running: results of a concurrent run
        # land out of order, so an interrupted one can leave a hole below the count.
        self.taken: dict[str, set[int]] = defaultdict(set)

    # -- what has happened ----------------------------------------------------------
    def observe(self, cell: Cell, result: RepetitionResult) -> None:
        if self.running[cell.key()]:  # a replayed (resumed) result was never yielded
            self.running[cell.key()] -= 1
        if result.status == "interrupted":
            self.taken[cell.key()].discard(result.repetition)
            return  # not complete: a resume runs it again
        self.taken[cell.key()].add(result.repetition)
        self.done[cell.key()] += 1
        if result.status in PRUNING_STATUSES:
            series = series_key(cell)
            if series not in self.limit or cell.batch_size < self.limit[series][0]:
                self.limit[series] = (cell.batch_size, result.status)
        if result.valid and result.throughput:
            self.throughput[cell.key()].append(result.throughput)

    def skip_reason(self, cell: Cell) -> str | None:
        """Why a cell is not worth running: a smaller (or equal) batch already failed."""
        limit = self.limit.get(series_key(cell))
        if limit and cell.batch_size >= limit[0]:
            return f"{limit[1]} at batch {limit[0]}"
        return None

    def missing(self, cell: Cell) -> int:
        return max(self.spec.repeats - self._issued(cell), 0)

    def _issued(self, cell: Cell) -> int:
        return self.done[cell.key()] + self.running[cell.key()]

    def _issue(self, cell: Cell) -> tuple[Cell, int]:
        """The cell with its lowest repetition index neither stored nor running."""
        taken = self.taken[cell.key()]
        repetition = next(i for i in range(len(taken) + 1) if i not in taken)
        taken.add(repetition)
        self.running[cell.key()] += 1
        return cell, repetition

    # -- what to do next ---------------------------------------------------------------
    def grid(self) -> list[Cell]:
        """The spec's cells, each series in ascending batch order (so pruning can bite)."""
        cells = self.spec.cells()
        order = {key: i for i, key in enumerate(dict.fromkeys(series_key(c) for c in cells))}
        return sorted(cells, key=lambda c: (order[series_key(c)], c.batch_size))

    def total(self) -> int:
        if self.spec.find_max_batch:
            steps = self.spec.max_batch.bit_length()
            return len(self._heads()) * steps * self.spec.repeats
        return len(self.grid()) * self.spec.repeats

    def next_cells(self) -> Iterator[tuple[Cell, int] | None]:
        """(cell, repetition index) pairs still to run, decided one at a time; None: wait
        for a running one's result first."""
        if self.spec.find_max_batch:
            yield from self._doubling()
            return
        cells = self.grid()
        for rep in range(self.spec.repeats):  # repetitions interleaved across cells
            for cell in cells:
                if self._issued(cell) <= rep:
                    yield self._issue(cell)

    def _heads(self) -> list[Cell]:
        """One cell per series, at batch 1: where a doubling search starts."""
        return self.spec.model_copy(update={"batch_sizes": [1]}).cells()

    def _doubling(self) -> Iterator[tuple[Cell, int]]:
        for head in self._heads():
            best, stale, batch = 0.0, 0, 1
            while batch <= self.spec.max_batch and stale < PATIENCE:
                cell = head.model_copy(update={"batch_size": batch})
                while self.missing(cell) and not self.skip_reason(cell):
                    yield self._issue(cell)
                while self.running[cell.key()]:  # its results decide the next batch
                    yield None
                if self.skip_reason(cell) or not self.throughput[cell.key()]:
                    break  # failed, wrong or unavailable: no larger batch will do better
                value = statistics.median(self.throughput[cell.key()])
                stale = 0 if value > best * (1 + MIN_GAIN) else stale + 1
                best = max(best, value)
                batch *= 2

    def best_batches(self, cells: list[Cell]) -> dict[str, tuple[int, float]]:
        """Series -> (batch, median throughput) with the highest throughput."""
        best: dict[str, tuple[int, float]] = {}
        for cell in cells:
            values = self.throughput.get(cell.key())
            if values:
                value = statistics.median(values)
                series = series_key(cell)
                if series not in best or value > best[series][1]:
                    best[series] = (cell.batch_size, value)
        return best
