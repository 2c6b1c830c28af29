"""What every worker process does around its measurement: turn any failure into a
result, time the whole repetition, write the JSON, and exit without teardown."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from stackcost.env import now
from stackcost.execute.task import RepetitionTask
from stackcost.result import Phases, RepetitionResult

T = TypeVar("T", bound=RepetitionTask)
# The measurement itself: fills the result in place; t_start is the worker's clock origin.
Body = Callable[[T, RepetitionResult, Phases, float], None]


# Text of an allocation failure, whatever raised it: c10's CPU allocator, C++'s
# std::bad_alloc (from a native program's "error:" line), CUDA's caching allocator
# ("CUDA out of memory"), errno ENOMEM.
OOM_MARKERS = (
    "DefaultCPUAllocator: can't allocate memory",
    "std::bad_alloc",
    "out of memory",
    "Cannot allocate memory",
)
# The store keeps a reason whole, up to this many characters (head and tail of a log).
REASON_LIMIT = 16_000


def reason_of(exc: BaseException) -> str:
    """The exception as a cell's reason: its whole text, for the store; tables show its
    headline (stackcost.result.headline)."""
    text = f"{type(exc).__name__}: {exc}".strip() or type(exc).__name__
    if len(text) > REASON_LIMIT:
        half = REASON_LIMIT // 2
        text = f"{text[:half]}\n[... {len(text) - REASON_LIMIT} characters ...]\n{text[-half:]}"
    return text


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc)
    return any(marker in text for marker in OOM_MARKERS)


def _exit_reason(exc: SystemExit) -> str:
    return f"user code called sys.exit({exc.code!r}) during the repetition"


def settle(result: RepetitionResult) -> None:
    """A measured repetition whose loop shared the cores is `disturbed`, never `ok`: the
    disturbance outranks `unstable` (it is the likelier cause), not `wrong`."""
    d = result.disturbance
    if d is not None and d.disturbed and result.status in ("ok", "unstable"):
        unstable = result.reason if result.status == "unstable" else ""
        result.status, result.reason = "disturbed", d.reason()
        if unstable:
            result.reason += f"; also unstable: {unstable}"


def guarded(task: T, body: Body) -> RepetitionResult:
    """Run `body`; an exception is a result (failed, or oom), never a lost repetition.

    User code (a model factory, a custom backend) runs inside `body`, so its sys.exit,
    or an allocation failure deep in a framework, becomes this cell's result too."""
    t_start = time.perf_counter()
    phases = Phases()
    result = RepetitionResult(status="failed", repetition=task.repetition, started_at=now())
    try:
        body(task, result, phases, t_start)
        settle(result)
    except SystemExit as exc:
        result.status, result.reason = "failed", _exit_reason(exc)
        result.log_tail = traceback.format_exc()[-4000:]
    except Exception as exc:  # a failure is a result: store it and let the run go on
        result.status = "oom" if is_oom(exc) else "failed"
        result.reason = reason_of(exc)
        result.log_tail = traceback.format_exc()[-4000:]
    phases.total_s = time.perf_counter() - t_start
    result.phases = phases
    result.finished_at = now()
    return result


def serve(task_type: type[T], body: Body, argv: list[str] | None = None) -> NoReturn:
    """The worker's main: python -m MODULE TASK.json RESULT.json."""
    task_path, result_path = (argv or sys.argv[1:])[:2]
    task = task_type.model_validate_json(Path(task_path).read_text())
    Path(result_path).write_text(guarded(task, body).model_dump_json())
    # Skip interpreter teardown (up to ~1 s for OpenVINO): the result is on disk, and
    # the parent's per-repetition overhead should not include framework destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
