"""Process memory: RSS now, and the kernel's RSS high-water mark.

The peak comes from VmHWM, which the kernel maintains on every page fault, so it is
exact and costs nothing on the hot path (no sampling thread competing for the GIL).
Writing "5" to /proc/self/clear_refs resets it, which lets the engine exclude the
eager reference forward from a backend's peak.
"""

from __future__ import annotations

import resource
from pathlib import Path

import psutil

_STATUS = Path("/proc/self/status")
_SMAPS_ROLLUP = Path("/proc/self/smaps_rollup")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


def anon_huge_bytes() -> int | None:
    """Anonymous memory this process holds on transparent huge pages; None where the kernel
    does not say (no smaps_rollup)."""
    try:
        text = _SMAPS_ROLLUP.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return None


def reset_peak() -> bool:
    """Reset the high-water mark to the current RSS; False where the kernel can't."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
