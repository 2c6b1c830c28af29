"""An in-memory run with every kind of baseline a ratio can meet, for the marks tests.

One workload per batch size, eager and torchscript on each (exact timings: every sample
equal, so ratios can be checked):
- batch 1: eager unstable, torchscript ok: the ratio exists, over an untrusted baseline;
- batch 2: eager disturbed (its only repetition), torchscript ok: no ratio at all;
- batch 4: eager ok, torchscript disturbed in one of two repetitions: a clean baseline,
  and a disturbed cell whose shown median is its undisturbed repetition's;
- batch 8: both ok: the plain case.
"""

from __future__ import annotations

from pathlib import Path

from stackcost.cell import Cell
from stackcost.measure.disturbance import Disturbance
from stackcost.measure.stats import summarize
from stackcost.result import Memory, RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.store.runs import RunResult

EAGER_MS = 10.0
TS_MS = 6.0
BUSY_MS = 31.0  # what a disturbed repetition measured: skewed, never a baseline
DISTURBANCE = Disturbance(
    others_cores=1.02, own_cores=1.0, window_s=2.0, threshold_cores=0.27, disturbed=True
)
UNSTABLE_REASON = "time cap reached before the CI target"


def rep(ms: float, status: str = "ok", repetition: int = 0, reason: str = "") -> RepetitionResult:
    samples = [int(ms * 1e6)] * 20
    disturbance = DISTURBANCE if status == "disturbed" else None
    return RepetitionResult(
        status=status,
        repetition=repetition,
        reason=disturbance.reason() if disturbance else reason,
        stats=summarize(samples),
        samples_ns=samples,
        throughput=1e3 / ms,
        cold_start_ms=2 * ms,
        memory=Memory(
            baseline_rss_bytes=100 * 2**20,
            peak_rss_bytes=200 * 2**20,
            peak_over_baseline_bytes=100 * 2**20,
        ),
        disturbance=disturbance,
    )


def cell(backend: str, batch: int, threads: int = 1) -> Cell:
    return Cell(model=model_ref("mlp"), backend=backend, batch_size=batch, threads=threads)


def marks_run(records: list[tuple[Cell, RepetitionResult]] | None = None) -> RunResult:
    if records is None:
        records = [
            (cell("eager", 1), rep(EAGER_MS, "unstable", reason=UNSTABLE_REASON)),
            (cell("torchscript", 1), rep(TS_MS)),
            (cell("eager", 2), rep(BUSY_MS, "disturbed")),
            (cell("torchscript", 2), rep(TS_MS)),
            (cell("eager", 4), rep(EAGER_MS)),
            (cell("torchscript", 4), rep(TS_MS)),
            (cell("torchscript", 4), rep(BUSY_MS, "disturbed", repetition=1)),
            (cell("eager", 8), rep(EAGER_MS)),
            (cell("torchscript", 8), rep(TS_MS)),
        ]
    return RunResult(run_id="marks", db_path=Path("marks.db"), env={}, spec={}, records=records)
