"""Plan a spec into repetitions, run them through an executor, commit each result."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from stackcost.backends import Availability, Capabilities, load_backend
from stackcost.cell import Cell
from stackcost.env import collect, now
from stackcost.execute.local import Executor, LocalExecutor
from stackcost.execute.task import RepetitionTask
from stackcost.result import RepetitionResult
from stackcost.runs import RunResult
from stackcost.spec import RunSpec
from stackcost.store import Store

# Called after each stored repetition: (cell, result, done, total).
OnResult = Callable[[Cell, RepetitionResult, int, int], None]
# Called before each repetition starts: (cell, repetition index).
OnStart = Callable[[Cell, int], None]


def _device_reason(device: str) -> str | None:
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device here (torch.cuda.is_available() is False)"
    return None


def why_not_runnable(
    cell: Cell, cache: dict[str, tuple[Availability, Capabilities]]
) -> tuple[str, str] | None:
    """(status, reason) for a cell that cannot run, decided without spawning a worker."""
    if cell.backend not in cache:
        backend = load_backend(cell.backend)
        cache[cell.backend] = (backend.available(), backend.capabilities)
    availability, capabilities = cache[cell.backend]
    if not availability.ok:
        return "unavailable", availability.reason
    problem = capabilities.why_not(cell)
    if problem:
        return "unsupported", problem
    device = _device_reason(cell.device)
    return ("unavailable", device) if device else None


def execute(
    spec: RunSpec,
    store: Store,
    *,
    executor: Executor | None = None,
    command: str = "",
    on_start: OnStart | None = None,
    on_result: OnResult | None = None,
) -> RunResult:
    executor = executor or LocalExecutor()
    cells = spec.cells()
    run_id = store.create_run(spec.model_dump(mode="json"), collect(spec.threads), command)
    total, done = len(cells) * spec.repeats, 0
    cache: dict[str, tuple[Availability, Capabilities]] = {}
    artifacts = Path(tempfile.mkdtemp(prefix="stackcost-run-"))
    interrupted = False
    try:
        runnable: list[tuple[Cell, int]] = []
        for cell in cells:
            cell_id = store.add_cell(run_id, cell)
            blocked = why_not_runnable(cell, cache)
            if blocked is None:
                runnable.append((cell, cell_id))
                continue
            for rep in range(spec.repeats):
                result = RepetitionResult(
                    status=blocked[0],
                    reason=blocked[1],
                    repetition=rep,  # type: ignore[arg-type]
                    started_at=now(),
                    finished_at=now(),
                )
                store.add_repetition(cell_id, result)
                done += 1
                if on_result:
                    on_result(cell, result, done, total)

        def tasks():
            for rep in range(spec.repeats):  # repetitions interleaved across cells
                for i, (cell, _) in enumerate(runnable):
                    if on_start:
                        on_start(cell, rep)
                    yield RepetitionTask(
                        cell=cell,
                        repetition=rep,
                        protocol=spec.protocol,
                        tolerance=spec.tolerance.get(cell.precision, 1e-4),
                        timeout_s=spec.timeout_s,
                        workdir=str(artifacts / f"{i}-{rep}"),
                    )

        ids = {cell.key(): cell_id for cell, cell_id in runnable}
        for task, result in executor.map(tasks()):
            store.add_repetition(ids[task.cell.key()], result)
            done += 1
            if on_result:
                on_result(task.cell, result, done, total)
            if result.status == "interrupted":
                interrupted = True
                break
    finally:
        shutil.rmtree(artifacts, ignore_errors=True)
        store.finish_run(run_id)
    result = RunResult.from_store(store, run_id)
    if interrupted:
        raise KeyboardInterrupt
    return result
