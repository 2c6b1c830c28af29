"""Reading a run-json (`stackcost report --format run-json`) back, validated before use.

A file cut short by a full disk or an interrupted copy, or edited by hand, is refused
in one line that says where it broke, instead of a traceback halfway through a compare.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from stackcost.cell import Cell
from stackcost.clip import one_line, shown
from stackcost.errors import SpecError
from stackcost.result import RepetitionResult
from stackcost.store.runs import RunResult

REWRITE = "write it again with `stackcost report RUN --format run-json -o FILE`"


class Record(BaseModel):
    cell: Cell
    result: RepetitionResult


class RunJson(BaseModel):
    """What run_to_json writes."""

    model_config = ConfigDict(extra="ignore")
    run_id: str | None = None
    env: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    records: list[Record]


def read_run_json(path: Path) -> RunResult:
    """The run in `path`; SpecError, naming the file and the fault, when it is not one."""
    name = shown(str(path))
    try:
        payload = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SpecError(f"{name} is not UTF-8 text (offset {exc.start}): not a run-json") from None
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            f"if it was cut short, {REWRITE}"
        ) from None
    except RecursionError:
        raise SpecError(f"{name} is nested too deeply to be a run-json") from None
    except OSError as exc:
        raise SpecError(f"{name} cannot be read ({exc.strerror})") from None
    if isinstance(payload, dict) and "records" not in payload:
        raise SpecError(
            f"{name} has per-cell summaries only; compare needs per-repetition samples: "
            "pass the .db file, a run id, or a run-json"
        )
    try:
        run = RunJson.model_validate(payload)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the top level"
        raise SpecError(
            f"{name} is not a run-json: {one_line(where, 60)}: {one_line(err['msg'], 80)}; "
            f"{REWRITE}"
        ) from None
    if not run.records:
        raise SpecError(f"{name} holds no repetitions: there is nothing to compare")
    return RunResult(
        run_id=run.run_id or path.stem,
        db_path=path,
        env=run.env,
        spec=run.spec,
        records=[(r.cell, r.result) for r in run.records],
    )
