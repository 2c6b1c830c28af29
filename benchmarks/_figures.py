"""Writing a benchmark's figures as JSON, stamped with the date and the machine."""

from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from stackcost.env import cpu_info, gpus


def write_figures(path: Path, benchmark: str, figures: dict[str, Any], console: Console) -> None:
    payload = {
        "benchmark": benchmark,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        # The GPUs NVML lists (none, with the reason, on a machine without one).
        "machine": {"cpu": cpu_info(), "gpus": gpus()[0], "python": platform.python_version()},
        **figures,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))
    console.print(f"figures written to {path}")
