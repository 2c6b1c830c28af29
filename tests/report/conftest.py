"""A small real store for the report tests: 2 backends × batch 1,2,4 × res 32,64 × 3 repeats.

Plus a failed cell (whose model name and reason are hostile HTML), a "wrong" cell and a
"skipped" cell; everything goes through Store and comes back through RunResult.from_store.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stackcost.cell import Cell
from stackcost.measure.stats import summarize
from stackcost.result import Memory, Phases, RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from stackcost.verify import Verification

EVIL_MODEL = "<script>alert(1)</script>"
EVIL_REASON = "boom <img src=x onerror=alert(2)>"
WRONG_MS = 123.456  # a timing the "wrong" cell measured: it must never be shown
BACKENDS = ("eager", "torchscript")
BATCHES = (1, 2, 4)
RESOLUTIONS = (32, 64)
REPEATS = 3


def _ok(cell: Cell, rep: int, scale: float, status: str = "ok") -> RepetitionResult:
    rng = np.random.default_rng(int(cell.key()[:8], 16) + rep)
    base_ms = scale * cell.batch_size**0.8 * (cell.resolution / 32) ** 2 * (1 + 0.03 * rep)
    samples = [int(base_ms * 1e6 * (1 + 0.02 * x)) for x in rng.standard_normal(30)]
    stats = summarize(samples)
    rss = int((200 + 10 * scale * cell.batch_size * cell.resolution / 32) * 2**20)
    err = 3e-6 if cell.backend != "eager" else 0.0
    return RepetitionResult(
        status=status,
        repetition=rep,
        stats=stats,
        samples_ns=samples,
        throughput=cell.batch_size / (stats.median_ms / 1e3),
        cold_start_ms=50 * scale,
        memory=Memory(
            baseline_rss_bytes=150 * 2**20,
            peak_rss_bytes=rss,
            peak_over_baseline_bytes=rss - 150 * 2**20,
            # torch.cuda.max_memory_allocated exists only on a GPU.
            allocator_peak_bytes=int(rss * scale * 2) if cell.device == "cuda" else None,
        ),
        verification=Verification(max_abs_err=err, max_rel_err=err, tolerance=1e-4, ok=True),
        phases=Phases(prepare_s=0.2 * scale),
    )


def build_store(path, *, find_max_batch: bool = False, device: str = "cpu") -> tuple[Store, str]:
    store = Store(path)
    spec = {"models": ["mlp"], "repeats": REPEATS, "find_max_batch": find_max_batch}
    env = {
        "stackcost": "0.1.0",
        "versions": {"torch": "2.13.0", "onnxruntime": None},
        "cpu": {"model": "Test CPU <b>bold</b>", "logical_cores": 8},
        "threads": {"requested": [1]},
        "project_git": {"commit": "abc123", "dirty": False},
    }
    run_id = store.create_run(spec, env, "stackcost run test")
    mlp = model_ref("mlp")
    for backend, scale in zip(BACKENDS, (1.0, 0.6), strict=True):
        for batch in BATCHES:
            for res in RESOLUTIONS:
                cell = Cell(
                    model=mlp, backend=backend, batch_size=batch, resolution=res, device=device
                )
                cell_id = store.add_cell(run_id, cell)
                for rep in range(REPEATS):
                    store.add_repetition(cell_id, _ok(cell, rep, scale))
    # A "wrong" cell: it measured a time, but the output was off; timings must stay hidden.
    wrong = Cell(model=mlp, backend="onnxruntime", batch_size=1, resolution=32)
    wrong_id = store.add_cell(run_id, wrong)
    for rep in range(REPEATS):
        r = _ok(wrong, rep, WRONG_MS, status="wrong")
        r.verification = Verification(max_abs_err=0.5, max_rel_err=0.5, tolerance=1e-4, ok=False)
        r.reason = "max rel err 5.0e-01 > 1.0e-04"
        store.add_repetition(wrong_id, r)
    # A failed cell with hostile strings in the model name and the reason.
    evil = Cell(model=model_ref("mlp").model_copy(update={"name": EVIL_MODEL}), backend="eager")
    store.add_repetition(
        store.add_cell(run_id, evil),
        RepetitionResult(status="failed", reason=EVIL_REASON, log_tail="Traceback <b>x</b>"),
    )
    # A valid cell of the hostile model too, so its name reaches the plotly figures.
    evil_ok = Cell(model=evil.model, backend="eager", batch_size=1, resolution=32)
    store.add_repetition(store.add_cell(run_id, evil_ok), _ok(evil_ok, 0, 1.0))
    # A cell pruned after an OOM at a smaller batch.
    skipped = Cell(model=mlp, backend="torchscript", batch_size=8, resolution=64)
    store.add_repetition(
        store.add_cell(run_id, skipped),
        RepetitionResult(status="skipped", reason="oom at batch 8"),
    )
    store.finish_run(run_id)
    return store, run_id


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> list[RunResult]:
    path = tmp_path_factory.mktemp("store") / "s.db"
    store, run_id = build_store(path, find_max_batch=True)
    with store:
        return [RunResult.from_store(store, run_id)]


@pytest.fixture(scope="session")
def single_batch_runs(tmp_path_factory) -> list[RunResult]:
    """Only batch 1 and only resolution 32: both 'vs' plots must be skipped with a note."""
    path = tmp_path_factory.mktemp("single") / "s.db"
    with Store(path) as store:
        run_id = store.create_run({}, {})
        for backend, scale in zip(BACKENDS, (1.0, 0.6), strict=True):
            cell = Cell(model=model_ref("mlp"), backend=backend, batch_size=1, resolution=32)
            cell_id = store.add_cell(run_id, cell)
            for rep in range(2):
                store.add_repetition(cell_id, _ok(cell, rep, scale))
        return [RunResult.from_store(store, run_id)]


@pytest.fixture(scope="session")
def failed_runs(tmp_path_factory) -> list[RunResult]:
    """A run where nothing worked."""
    path = tmp_path_factory.mktemp("failed") / "s.db"
    with Store(path) as store:
        run_id = store.create_run({}, {})
        for backend in BACKENDS:
            cell = Cell(model=model_ref("mlp"), backend=backend)
            store.add_repetition(
                store.add_cell(run_id, cell), RepetitionResult(status="crashed", reason="SIGSEGV")
            )
        return [RunResult.from_store(store, run_id)]


def finite(x: float | None) -> bool:
    return x is not None and not math.isnan(x)
