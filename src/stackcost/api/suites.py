"""A benchmark suite's stored runs, found for its summary without measuring anything.

Measuring a suite is grid.Session.measure_suite; this reads what such runs stored, on
whichever machines they ran (a merged store).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from stackcost.errors import SpecError

if TYPE_CHECKING:
    from stackcost.report.frames.suite import StoredSuite
    from stackcost.runspec.suite import Suite

__all__ = ["stored_runs"]


def stored_runs(suite: Suite, db: str | Path) -> StoredSuite:
    """Each entry's latest stored run of `suite` in `db`, with the summary's expected rows.

    Raises:
        SpecError: `db` does not exist, or is not a store (one line, nothing written).
    """
    from stackcost.report.frames.suite import stored_runs as find
    from stackcost.store.database import Store

    if not os.path.exists(db):
        raise SpecError(f"--db {db}: no such store (run `stackcost suite {suite.name}` first)")
    with Store(db, read_only=True):  # refuses a file that is not a store, one line
        pass
    return find(suite, db)
