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


def one_line(exc: BaseException) -> str:
    """The exception as a cell's one-line reason. A multi-line message (a failed build's
    log tail) keeps its first line plus its first "error:" line (a compiler's diagnostic), so the reason
    names the compiler's complaint, not just "exit 1"."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if not text:
        return type(exc).__name__
    first, *rest = text.splitlines()
    error = next((line.strip() for line in rest if "error:" in line.lower()), "")
    return f"{first} {error}".strip()[:500]


def guarded(task: T, body: Body) -> RepetitionResult:
    """Run `body`; an exception is a result (failed, or oom), never a lost repetition."""
    t_start = time.perf_counter()
    phases = Phases()
    result = RepetitionResult(status="failed", repetition=task.repetition, started_at=now())
    try:
        body(task, result, phases, t_start)
    except MemoryError as exc:
        result.status, result.reason = "oom", one_line(exc) or "MemoryError"
    except Exception as exc:  # a failure is a result: store it and let the run go on
        result.status, result.reason = "failed", one_line(exc)
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
