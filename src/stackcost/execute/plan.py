"""What to run next: the grid minus what is stored, pruned after OOM or timeout, or a
doubling search for the best-throughput batch size; with --cell-ci, more repetitions of
the cells whose latency CI over processes is still too wide (the stop rule over processes).

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
from stackcost.measure.protocol import Protocol
from stackcost.measure.stats import repetition_interval, spreads
from stackcost.result import RepetitionResult
from stackcost.runspec.run import RULE_START, RunSpec

if TYPE_CHECKING:
    from stackcost.runspec.train import TrainSpec

# Out of memory or time at batch b: larger batches of the series would be too.
PRUNING_STATUSES = frozenset({"oom", "timeout"})
# A doubling step must beat the best throughput by this much to count as improving.
MIN_GAIN = 0.03
# Consecutive non-improving doublings before the search stops.
PATIENCE = 2
# The stop rule's cheaper processes time at least this long (or the run's own min time,
# if shorter): a window of the spreads needs a few iterations.
CHEAPEST_S = 0.25


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
        # The stop rule over processes: each cell's valid repetitions' samples, in timed
        # order, and the cells with a repetition that more processes would not mend.
        self.cell_ci: float | None = getattr(spec, "cell_ci", None)
        self.samples: dict[str, list[list[int]]] = defaultdict(list)
        self.settled: set[str] = set()

    # -- what has happened ----------------------------------------------------------
    def observe(self, cell: Cell, result: RepetitionResult, replayed: bool = False) -> None:
        """`replayed`: read back from the store by a resume, which runs again what is owed
        (RepetitionResult.owed); in the run that stored it, only an interrupted one is."""
        if self.running[cell.key()]:  # a replayed (resumed) result was never yielded
            self.running[cell.key()] -= 1
        if result.status == "interrupted" or (replayed and result.owed):
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
        if result.valid and result.samples_ns:
            self.samples[cell.key()].append(result.samples_ns)
        elif result.status != "disturbed":  # failed, wrong or unrunnable: no more of it
            self.settled.add(cell.key())

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

    def first_round(self) -> int:
        """Repetitions every cell gets: `repeats`, or at least RULE_START with the rule."""
        return self.spec.repeats if self.cell_ci is None else max(self.spec.repeats, RULE_START)

    def total(self) -> int:
        """Repetitions expected; with the stop rule, those of the first round."""
        if self.spec.find_max_batch:
            steps = self.spec.max_batch.bit_length()
            return len(self._heads()) * steps * self.spec.repeats
        return len(self.grid()) * self.first_round()

    def next_cells(self) -> Iterator[tuple[Cell, int] | None]:
        """(cell, repetition index) pairs still to run, decided one at a time; None: wait
        for a running one's result first."""
        if self.spec.find_max_batch:
            yield from self._doubling()
            return
        cells = self.grid()
        for rep in range(self.first_round()):  # repetitions interleaved across cells
            for cell in cells:
                if self._issued(cell) <= rep:
                    yield self._issue(cell)
        if self.cell_ci is None:
            return
        while True:  # the stop rule: a round more of the cells it is not yet met for
            while any(self.running.values()):
                yield None
            more = [cell for cell in cells if self.wants_more(cell)]
            if not more:
                return
            for cell in more:
                yield self._issue(cell)

    def interval_width(self, cell: Cell) -> float | None:
        """The relative half-width of the cell's latency CI over its valid repetitions (what
        the tables show as latency +/- CI); None with fewer than two."""
        medians = [statistics.median(s) / 1e6 for s in self.samples[cell.key()]]
        interval = repetition_interval(medians, self.spec.protocol.confidence)
        return None if interval is None else interval.half_width_rel

    def wants_more(self, cell: Cell) -> bool:
        """The stop rule over processes: another repetition while the cell's CI is wider
        than +/-cell_ci, below max_repeats. Not for a LoadGen cell (LoadGen's verdict), nor
        one with a repetition that more processes would not mend."""
        if self.cell_ci is None or cell.scenario is not None or self.skip_reason(cell):
            return False
        if cell.key() in self.settled or self._issued(cell) >= self.spec.max_repeats:
            return False
        width = self.interval_width(cell)
        return width is not None and width > self.cell_ci

    def protocol_for(self, cell: Cell, repetition: int) -> Protocol | None:
        """The protocol of a repetition the stop rule added, None for the first round's.
        Where the processes differ by more than their own noise explains, only more of
        them average that away: cheaper ones, at half the min time. Where the noise
        within a process dominates, longer ones (twice the min time) cut it."""
        if self.cell_ci is None or repetition < self.first_round():
            return None
        protocol = self.spec.protocol
        if spreads(self.samples[cell.key()]).between_dominates:
            seconds = max(protocol.min_time_s / 2, min(protocol.min_time_s, CHEAPEST_S))
        else:
            seconds = min(protocol.min_time_s * 2, protocol.max_time_s)
        return protocol.model_copy(update={"min_time_s": seconds})

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
