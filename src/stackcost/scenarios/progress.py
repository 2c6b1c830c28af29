"""A repetition's finished parts, handed to the parent while the repetition still runs:
the worker appends one JSON line to its workdir's progress file as each part finishes
(a serve sweep's rate), and the executor reads them as they land, so the run commits each
one to the store at once, and a worker that dies mid-sweep loses nothing it finished."""

from __future__ import annotations

import json
from pathlib import Path

from stackcost.result import RateFigures

PROGRESS_FILE = "progress.jsonl"


def append(workdir: str | Path, index: int, rate: RateFigures) -> None:
    """Rate `index` of the sweep (0: one at a time, 1: all at once, then those between)."""
    line = json.dumps({"index": index, "rate": rate.model_dump(mode="json")})
    with (Path(workdir) / PROGRESS_FILE).open("a") as out:
        out.write(line + "\n")


class Reader:
    """The lines of a workdir's progress file not read yet: whole lines only (a line the
    worker is still writing is read next time), each once."""

    def __init__(self, workdir: str | Path) -> None:
        self.path = Path(workdir) / PROGRESS_FILE
        self.offset = 0

    def new(self) -> list[tuple[int, RateFigures]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(whole)
        out = []
        for line in whole.decode().splitlines():
            item = json.loads(line)
            out.append((int(item["index"]), RateFigures.model_validate(item["rate"])))
        return out


def read_all(workdir: str | Path) -> list[tuple[int, RateFigures]]:
    return Reader(workdir).new()
