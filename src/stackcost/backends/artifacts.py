"""Artifacts a cell's repetitions share: an exported ONNX graph, a compiled package.

Each repetition is its own process, and used to export or compile its own artifact: an
ONNX export or an Inductor compile per repetition, most of a short cell's wall time. A
run keeps one cache directory; an artifact is filed under a digest of everything that
determines it (the model and its weights digest, batch, sizes, precision, the exporter
or compiler settings, torch's version), so only an identical artifact is ever reused.

The first repetition makes it, and its cold start and startup are measured as before.
A repetition that reuses one says so (details["artifact"]["reused"]), and its startup is
not reported: its prepare skipped the work that startup measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORD = "artifact.json"  # written last: a directory without it is incomplete


def digest(key: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ArtifactCache:
    root: Path

    def reuse_or_make(
        self, key: Mapping[str, Any], make: Callable[[Path], dict[str, Any]]
    ) -> tuple[Path, dict[str, Any]]:
        """The artifact's directory and its record, made by `make(directory)` unless a
        complete one with this key exists. The record gains "artifact": {key digest,
        reused}. A half-made artifact (a repetition killed while exporting) is never
        found: it is made in a private directory and renamed into place when whole."""
        name = digest(key)
        home = self.root / name
        record_path = home / RECORD
        if record_path.exists():
            record = json.loads(record_path.read_text())
            return home, {**record, "artifact": {"key": name, "reused": True}}
        building = self.root / f".{name}.{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        record = make(building)
        (building / RECORD).write_text(json.dumps(record, default=str))
        try:
            building.rename(home)
        except OSError:  # another process filed the same artifact first: use ours
            return building, {**record, "artifact": {"key": name, "reused": False}}
        return home, {**record, "artifact": {"key": name, "reused": False}}

    def directory(self, key: Mapping[str, Any]) -> tuple[Path, bool]:
        """A directory a tool fills itself (Inductor's kernel cache), and whether an earlier
        repetition already filled it."""
        home = self.root / digest(key)
        reused = home.is_dir() and any(home.iterdir())
        home.mkdir(parents=True, exist_ok=True)
        return home, reused
