"""The memory allocator a worker runs with, declared once: the spec, the task and the flags
read it from here. Imports nothing of stackcost.

glibc's malloc serves a block above its mmap threshold with a fresh mmap, and gives the top
of its heap back to the kernel once more than its trim threshold is free there. Both
thresholds move while the process runs: freeing an mmapped block raises the mmap threshold
to its size, and the trim threshold to twice that. So whether a step's activations land on
pages the process already holds, or on fresh pages that fault on first touch every step,
is set by the order its first steps allocated and freed them: by the process, not by the
code or the machine. On a stack of 3x3 convolutions whose activations are a few MB, one
process ran with no page faults and the next with tens of thousands a step at 2.5x the
time, the whole way through (benchmarks/layout_spread.py; its records say where and when).

`steady` fixes both thresholds, as a tuned deployment does: blocks up to 32 MiB (glibc's
most for the mmap threshold on 64-bit) come from the heap, and the heap is never trimmed,
so every process reuses the pages it faulted once. It changes where buffers live, never a
value; a step whose blocks exceed 32 MiB still maps them afresh. `glibc` is what a plain
Python process gets. The worker's page faults per step are recorded either way
(details["page_faults_per_step"]).

`huge` is `steady` whose heap also asks the kernel for transparent huge pages
(`glibc.malloc.hugetlb=1`: madvise on what malloc maps). A cache indexes by physical
address, and with 4 KiB pages which physical pages a process's buffers land on, and so
which of them share cache sets, is drawn per process; on 2 MiB pages it follows their
addresses. It takes effect where the kernel's THP mode is `madvise` or `always`
(/sys/kernel/mm/transparent_hugepage/enabled); the huge pages a worker held at the end of
its loop are recorded (details["anon_huge_pages_mib"]).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Allocator:
    what: str  # for --help and the docs
    env: dict[str, str]  # set in the worker's environment before it starts


MMAP_THRESHOLD = 32 << 20  # bytes: glibc's largest allowed mmap threshold on 64-bit
TRIM_THRESHOLD = 1 << 40  # bytes: more free heap than any machine here has: never trimmed
STEADY = {
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
}

ALLOCATORS: dict[str, Allocator] = {
    "glibc": Allocator("glibc's malloc as a plain process gets it (thresholds that move)", {}),
    "steady": Allocator(
        "glibc's malloc with its mmap threshold fixed at 32 MiB and trimming off: a "
        "process reuses the pages it touched, whatever order it freed them in",
        STEADY,
    ),
    "huge": Allocator(
        "steady, on transparent huge pages (glibc.malloc.hugetlb=1): which cache sets a "
        "buffer uses follows its address, not the process's draw of 4 KiB pages",
        {**STEADY, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    ),
}
DEFAULT_ALLOCATOR = "glibc"  # run, sweep: what the user's own process would get
GATE_ALLOCATOR = "steady"  # ab, bisect: a regression, not the process's draw, must decide


def allocator_problem(name: str) -> str | None:
    """Why `name` is not an allocator, in one line; None when it is."""
    if name in ALLOCATORS:
        return None
    return f"allocator {name!r} is not known (allowed: {', '.join(ALLOCATORS)})"
