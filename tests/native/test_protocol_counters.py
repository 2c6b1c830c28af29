"""The native programs' disturbance counter (common/protocol.hpp, system_busy_s): pinned
to some cores, as a repetition on a Ray node is, it counts only those cores' busy time;
unpinned, all of them. The same rule as stackcost.measure.counters on the Python side."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stackcost.native

COMMON = Path(stackcost.native.__file__).parent / "common"
PROBE = """
#include "protocol.hpp"
#include <cstdio>
int main() {
  const double before = stackcost::system_busy_s();
  sleep(1);
  std::printf("%f\\n", stackcost::system_busy_s() - before);
}
"""

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found"),
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs"),
    pytest.mark.whole_machine,  # pins the program to one core and loads the others
]


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("probe")
    (home / "probe.cpp").write_text(PROBE)
    binary = home / "probe"
    subprocess.run(
        ["g++", "-std=c++17", "-O1", f"-I{COMMON}", str(home / "probe.cpp"), "-o", str(binary)],
        check=True,
    )
    return binary


def busy_seen(probe: Path, cpus: set[int] | None) -> float:
    """Busy CPU seconds the probe counted over its 1 s sleep, pinned to `cpus` or not."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    done = subprocess.run([str(probe)], preexec_fn=pin, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def test_a_pinned_native_program_counts_only_its_cores(probe: Path) -> None:
    # A session of its own, on core 1 only: the load of a measurement on the next core.
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        os.sched_setaffinity(burner.pid, {1})
        time.sleep(0.3)
        beside, under, everywhere = (busy_seen(probe, c) for c in ({0}, {1}, None))
    finally:
        burner.kill()
        burner.wait()
    assert beside < 0.5, beside  # core 0: the burner is not this program's disturbance
    assert under >= 0.8, under  # core 1: it is
    assert everywhere >= 0.8, everywhere  # unpinned: every CPU counts, as before
