"""Pinning a running process: every one of its threads, not only the one a pid names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stackcost.execute.cores import pin_threads

# A child with 3 extra threads, alive until its stdin closes.
CHILD = """
import sys, threading
for _ in range(3):
    threading.Thread(target=sys.stdin.read, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def allowed(pid: int) -> list[set[int]]:
    """Each thread's CPUs, from /proc (what the kernel will run it on)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out.append({int(c) for c in line.split()[1].split(",") if "-" not in c})
    return out


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity")
def test_pin_threads_moves_every_thread_of_a_running_process():
    cpu = min(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout and child.stdout.readline().strip() == "ready"
        pin_threads(child.pid, frozenset({cpu}))
        threads = allowed(child.pid)
        assert len(threads) == 4 and all(t == {cpu} for t in threads)
    finally:
        child.communicate("")


def test_pin_threads_skips_a_process_that_has_ended():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    pin_threads(child.pid, frozenset({0}))  # no error: nothing left to pin
