"""Measure a validated spec into a store: its user code asked once, the executor and the
store opened, every repetition run and committed as it lands.

`measure` does it all in one call. A command that shows live progress uses the steps:
the checks (`check_policy`, `check_db`, executors.check_executor), `prepare`, then a
`session` (the executor and the store, open) whose `measure` runs one spec, or whose
`measure_suite` runs a suite's entries one run each. Nothing here prints: progress and
notices reach the caller through callbacks.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.api.executors import (
    Executor,
    ExecutorChoice,
    MachineLock,
    check_executor,
    machine_lock,
    open_executor,
)
from stackcost.errors import SpecError
from stackcost.execute.probe import TIMEOUT_S as IMPORT_TIMEOUT_S
from stackcost.measure.disturbance import POLICIES
from stackcost.result import VALID_STATUSES, headline
from stackcost.runspec.run import RunSpec, db_problem
from stackcost.store.runs import RunResult

if TYPE_CHECKING:
    from stackcost.cell import Cell
    from stackcost.execute.runner import MakeTask, OnResult, OnRetry, OnStart, Prepared
    from stackcost.result import RepetitionResult
    from stackcost.runspec.train import TrainSpec
    from stackcost.store.database import Store

__all__ = [
    "IMPORT_TIMEOUT_S",
    "POLICIES",
    "Session",
    "check_db",
    "check_policy",
    "gate_problem",
    "measure",
    "prepare",
    "retry_line",
    "session",
]

# (run id, resumed, repetitions already stored): called once a run is open, before any work.
OnOpen = Callable[[str, bool, int], None]
# (entry index, run id, resumed, repetitions already stored): a suite entry's run is open.
OnEntryOpen = Callable[[int, str, bool, int], None]


def check_policy(on_disturbed: str) -> None:
    """Refuse (SpecError) an `on_disturbed` that is not one of POLICIES: retry (measure a
    disturbed repetition again once the machine is quiet), keep (store it marked), fail
    (store it and stop)."""
    if on_disturbed not in POLICIES:
        raise SpecError(
            f"--on-disturbed {on_disturbed!r} is not a policy (allowed: {', '.join(POLICIES)})"
        )


def check_db(db: str | Path) -> None:
    """Refuse (SpecError) a store path that cannot be written, before anything is."""
    if problem := db_problem(db):
        raise SpecError(problem)


def prepare(
    spec: RunSpec | TrainSpec | Prepared, import_timeout_s: float = IMPORT_TIMEOUT_S
) -> Prepared:
    """`spec` ready to run: its user code (model factories, custom backends) asked once, in
    one child, before any lock or store; a spec already prepared comes back as it is.

    `import_timeout_s` bounds that child's import of user code before it is called a hang.

    Raises:
        SpecError: bad user code, or sizes the model does not take.
    """
    from stackcost.execute.runner import prepare as prepare_spec

    return prepare_spec(spec, import_timeout_s=import_timeout_s)


@dataclass
class Session:
    """An open executor and store: the runs measured in it share them. Made by `session`."""

    store: Store
    executor: Executor
    command: str
    on_disturbed: str
    on_retry: OnRetry | None
    reuse: bool
    keep_artifacts: str | None = None

    def measure(
        self,
        prepared: Prepared,
        *,
        resume: bool = False,
        on_start: OnStart | None = None,
        on_result: OnResult | None = None,
        on_open: OnOpen | None = None,
        make_task: MakeTask | None = None,
    ) -> RunResult:
        """Run one prepared spec into the store: a new run, or with `resume` the latest
        run of the same spec and command in this environment, continued.

        `on_start(cell, repetition)` before each repetition; `on_result(cell, result,
        done, total)` after each is stored; `on_open(run_id, resumed, stored)` once the
        run is open. `make_task` builds each repetition's task (training's own).
        The result's `stopped` says why it stopped early (on_disturbed="fail").

        Raises:
            KeyboardInterrupt: after storing an interrupted run.
        """
        from stackcost.execute.runner import execute

        return execute(
            prepared,
            self.store,
            executor=self.executor,
            command=self.command,
            resume=resume,
            on_start=on_start,
            on_result=on_result,
            on_open=on_open,
            make_task=make_task,
            on_disturbed=self.on_disturbed,
            on_retry=self.on_retry,
            reuse_artifacts=self.reuse,
            keep_artifacts=Path(self.keep_artifacts) if self.keep_artifacts else None,
        )

    def measure_suite(
        self,
        entries: Sequence[Prepared],
        *,
        resume: bool = True,
        on_start: OnStart | None = None,
        on_result: OnResult | None = None,
        on_open: OnEntryOpen | None = None,
    ) -> list[RunResult]:
        """Run a suite's prepared entries, one run each, in order; stop after a run that
        stopped early. `on_result` counts done and total over the whole suite;
        `on_open(entry index, run_id, resumed, stored)` as each entry's run opens."""
        totals = [len(p.spec.cells()) * p.spec.repeats for p in entries]
        total = sum(totals)
        results: list[RunResult] = []
        for i, entry in enumerate(entries):
            offset = sum(totals[:i])

            def opened(run_id: str, resumed: bool, stored: int, i: int = i) -> None:
                if on_open:
                    on_open(i, run_id, resumed, stored)

            def stored(cell: Cell, rep: RepetitionResult, done: int, _: int, offset: int = offset):
                if on_result:
                    on_result(cell, rep, offset + done, total)

            result = self.measure(
                entry, resume=resume, on_start=on_start, on_result=stored, on_open=opened
            )
            results.append(result)
            if result.stopped:
                break
        return results


@contextlib.contextmanager
def session(
    db: str | Path,
    executor: ExecutorChoice | None = None,
    *,
    command: str = "",
    on_disturbed: str = "retry",
    on_retry: OnRetry | None = None,
    on_wait: Callable[[str], None] | None = None,
    on_cluster: Callable[[Any], None] | None = None,
) -> Iterator[Session]:
    """The executor, then the store `db` (created if need be), open for the block.

    `executor`: where repetitions run (default: locally, warm, waiting for the machine).
    `command`: recorded with each run, and shown to another stackcost waiting for the
    machine. `on_disturbed`: retry, keep or fail (check_policy). `on_retry(cell, result,
    try, of)` when a disturbed repetition is measured again; `on_wait(line)` while this
    process waits for the machine; `on_cluster(view)` as a Ray cluster's state changes.

    Raises:
        SpecError: a bad choice or policy, or a cluster that does not answer, before the
            store is opened.
        MachineBusy: executor.wait is False and another stackcost is measuring here.
    """
    from stackcost.store.database import Store

    choice = executor or ExecutorChoice()
    check_policy(on_disturbed)
    check_executor(choice)

    def lock() -> MachineLock:
        return machine_lock(wait=choice.wait, on_wait=on_wait, command=command)

    with open_executor(choice, lock, on_cluster) as opened, Store(db) as store:
        yield Session(
            store, opened, command, on_disturbed, on_retry, choice.reuse, choice.keep_artifacts
        )


def measure(
    spec: RunSpec | TrainSpec | Prepared,
    db: str | Path = "stackcost.db",
    *,
    executor: ExecutorChoice | None = None,
    command: str = "",
    resume: bool = False,
    on_disturbed: str = "retry",
    import_timeout_s: float = IMPORT_TIMEOUT_S,
    on_start: OnStart | None = None,
    on_result: OnResult | None = None,
    on_open: OnOpen | None = None,
    on_retry: OnRetry | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> RunResult:
    """Measure `spec` into the store `db` and return the run's typed results.

    Every check comes first, so bad input leaves nothing written: the policy, the
    executor, the store path, then the user code (prepare). The callbacks are those of
    `session` and `Session.measure`.

    Raises:
        SpecError: bad input, before anything is written.
        MachineBusy: executor.wait is False and another stackcost is measuring here.
        KeyboardInterrupt: after storing an interrupted run.
    """
    choice = executor or ExecutorChoice()
    check_policy(on_disturbed)
    check_executor(choice)
    check_db(db)
    prepared = prepare(spec, import_timeout_s)
    with session(
        db,
        choice,
        command=command,
        on_disturbed=on_disturbed,
        on_retry=on_retry,
        on_wait=on_wait,
    ) as opened:
        return opened.measure(
            prepared, resume=resume, on_start=on_start, on_result=on_result, on_open=on_open
        )


def gate_problem(results: Sequence[RunResult], first_reason: bool = True) -> str | None:
    """Why these runs must not pass a CI gate, in one line, or None.

    Either a run stopped early ("stopped: ..."), or nothing was measured cleanly (no
    repetition ok or unstable, or no cells at all), with the statuses counted and, with
    `first_reason`, the first repetition's reason. A failing cell alone is not one: the
    caller decides what it means.
    """
    if stopped := next((r.stopped for r in results if r.stopped), ""):
        return f"stopped: {stopped}"
    records = [rep for r in results for _, rep in r.records]
    statuses = Counter(rep.status for rep in records)
    if any(statuses[s] for s in VALID_STATUSES):
        return None
    summary = ", ".join(f"{n} {status}" for status, n in statuses.most_common())
    first = next((rep.reason for rep in records if rep.reason), "") if first_reason else ""
    why = f"; first reason: {headline(first)}" if first else ""
    return f"nothing was measured cleanly ({summary or 'no cells'}){why}"


def retry_line(cell: Cell, result: RepetitionResult, attempt: int, of: int) -> str:
    """What to say when a disturbed repetition is measured again (an on_retry's line)."""
    return (
        f"{cell.label()}: {headline(result.reason)}; try {attempt + 1} of {of + 1} "
        "once the machine is quiet (--on-disturbed keep stores it as it is)"
    )
