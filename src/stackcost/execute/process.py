"""What the worker process does around its measurement: turn any failure into a
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
from stackcost.result import RepetitionResult
from stackcost.scenarios.base import Progress
from stackcost.scenarios.task import RepetitionTask

T = TypeVar("T", bound=RepetitionTask)


# The measurement itself: its result, built once; `progress` is ticked as it goes.
Body = Callable[[T, Progress], RepetitionResult]


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


def settle(result: RepetitionResult) -> RepetitionResult:
    """A measured repetition whose loop shared the cores is `disturbed`, never `ok`: the
    disturbance outranks `unstable` (it is the likelier cause), not `wrong`."""
    d = result.disturbance
    if d is None or not d.disturbed or result.status not in ("ok", "unstable"):
        return result
    reason = d.reason()
    if result.status == "unstable" and result.reason:
        reason += f"; also unstable: {result.reason}"
    return result.model_copy(update={"status": "disturbed", "reason": reason})


def guarded(task: T, body: Body) -> RepetitionResult:
    """Run `body`; an exception is a result (failed, or oom), never a lost repetition.

    User code (a model factory, a custom backend) runs inside `body`, so its sys.exit,
    or an allocation failure deep in a framework, becomes this cell's result too."""
    progress = Progress()
    started_at = now()
    try:
        measured = settle(body(task, progress))
    except SystemExit as exc:
        measured = RepetitionResult(
            status="failed", reason=_exit_reason(exc), log_tail=traceback.format_exc()[-4000:]
        )
    except Exception as exc:  # a failure is a result: store it and let the run go on
        measured = RepetitionResult(
            status="oom" if is_oom(exc) else "failed",
            reason=reason_of(exc),
            log_tail=traceback.format_exc()[-4000:],
        )
    progress.phases.total_s = time.perf_counter() - progress.started
    # What every repetition carries, whatever its scenario did: added here, in one place.
    return measured.model_copy(
        update={
            "repetition": task.repetition,
            "started_at": started_at,
            "finished_at": now(),
            "phases": progress.phases,
            "weights_digest": progress.weights_digest,
        }
    )


def serve(read: Callable[[str], T], body: Body, argv: list[str] | None = None) -> NoReturn:
    """The worker's main: python -m MODULE TASK.json RESULT.json; `read` parses the task."""
    task_path, result_path = (argv or sys.argv[1:])[:2]
    task = read(Path(task_path).read_text())
    Path(result_path).write_text(guarded(task, body).model_dump_json())
    # Skip interpreter teardown (up to ~1 s for OpenVINO): the result is on disk, and
    # the parent's per-repetition overhead should not include framework destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
