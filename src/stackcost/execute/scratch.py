"""The run's scratch directory: exported models, compiled packages, the workers' files.

Its name carries the owning process's id, so the next run can tell a live run's
directory from one a killed run left behind (90-180 MB each was seen) and remove it.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "stackcost-run-"
_OWNED = re.compile(rf"{re.escape(PREFIX)}(\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def clean_orphans(root: Path | None = None) -> list[Path]:
    """Remove scratch directories whose run is dead; returns what was removed."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for path in root.glob(f"{PREFIX}*"):
        match = _OWNED.match(path.name)
        if match and path.is_dir() and not _alive(int(match[1])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def make(root: Path | None = None) -> Path:
    """A fresh scratch directory for this process's run."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))


def remove(path: Path | str) -> None:
    shutil.rmtree(path, ignore_errors=True)
