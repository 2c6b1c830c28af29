"""A cell's repetitions share its exported and compiled artifacts, labelled as reused."""

from __future__ import annotations

import pytest

from stackcost.backends.artifacts import ArtifactCache
from stackcost.execute.local import LocalExecutor
from stackcost.execute.machine_lock import MachineLock
from stackcost.execute.runner import execute
from stackcost.result import MEASURED_STATUSES
from stackcost.result import artifact_reused as reused
from stackcost.runspec.run import RunSpec, model_ref
from stackcost.store.database import Store
from tests.conftest import FAST


def test_an_artifact_is_made_once_per_key_and_a_half_made_one_is_never_found(tmp_path):
    cache = ArtifactCache(tmp_path)
    made: list[str] = []

    def make(home):
        made.append(home.name)
        (home / "a.bin").write_bytes(b"x")
        return {"export_s": 1.5}

    first_home, first = cache.reuse_or_make({"model": "mlp", "batch": 2}, make)
    again_home, again = cache.reuse_or_make({"model": "mlp", "batch": 2}, make)
    other_home, other = cache.reuse_or_make({"model": "mlp", "batch": 4}, make)
    assert len(made) == 2 and first_home == again_home != other_home
    assert not reused(first) and reused(again) and not reused(other)
    assert again["export_s"] == 1.5 and (again_home / "a.bin").exists()

    def dies(home):
        raise RuntimeError("killed mid-export")

    with pytest.raises(RuntimeError):
        cache.reuse_or_make({"model": "cnn"}, dies)
    # Nothing was filed under the key: the next repetition makes it whole.
    _, record = cache.reuse_or_make({"model": "cnn"}, make)
    assert not reused(record)


ONNX_RUNGS = ("onnxruntime", "openvino")


def _sweep(tmp_path, reuse: bool, backends: list[str], repeats: int = 2):
    spec = RunSpec(
        models=[model_ref("mlp")],
        backends=backends,
        resolutions=[4],
        batch_sizes=[2],
        repeats=repeats,
        protocol=FAST,
        # The ONNX rungs' exporter; the run refuses an option a rung does not read.
        backend_options={b: {"exporter": "legacy"} for b in backends if b in ONNX_RUNGS},
    )
    executor = LocalExecutor(lock=MachineLock(tmp_path / "lock"))
    with Store(tmp_path / f"{reuse}.db") as store:
        # keep: a disturbed try retried would reuse what the stored try exported.
        return execute(spec, store, executor=executor, reuse_artifacts=reuse, on_disturbed="keep")


def _repetitions(result):
    return [(c.cell.backend, r) for c in result.cells() for r in c.repetitions]


# The rungs each reuse test reads from the one shared sweep. Eager first: its first
# repetition computes the reference every later one loads.
SHARED = {
    "test_later_repetitions_load_the_trace_and_the_reference_and_still_verify": (
        "eager",
        "torchscript",
    ),
    "test_onnx_is_exported_once_per_shape_and_shared_by_both_onnx_rungs": ONNX_RUNGS,
    "test_inductor_repetitions_share_the_cells_kernel_cache": ("inductor",),
}


@pytest.fixture(scope="module")
def reused_sweep(request, tmp_path_factory) -> list:
    """One sweep with reuse on, two repetitions of every rung the selected reuse tests read
    (one worker starter, one probe, one store), each test asserting on its own rungs.
    Artifacts are keyed by shape, weights and exporter, so one rung's never serves another's
    except as those tests expect (the ONNX graph, eager's reference)."""
    # A docs example (Sybil's) in the same session has a name but no originalname.
    selected = {getattr(item, "originalname", item.name) for item in request.session.items}
    backends = [b for test, rungs in SHARED.items() if test in selected for b in rungs]
    return _repetitions(_sweep(tmp_path_factory.mktemp("reused"), True, backends))


def _of(reps, backends) -> list:
    return [(b, r) for b, r in reps if b in backends]


def test_onnx_is_exported_once_per_shape_and_shared_by_both_onnx_rungs(reused_sweep):
    reps = _of(reused_sweep, ONNX_RUNGS)
    assert len(reps) == 4 and all(r.status in MEASURED_STATUSES for _, r in reps)
    assert all(r.verification.ok for _, r in reps)
    keys = {r.details["artifact"]["key"] for _, r in reps}
    assert len(keys) == 1  # one graph for both rungs: the same shape, weights and exporter
    # Exported by the first repetition that needed it; every other one reused it.
    assert sum(not reused(r.details) for _, r in reps) == 1
    for _, r in reps:
        assert (r.startup_ms is None) == reused(r.details)
        assert r.details["worker_start"]["kind"] == "warm"


def test_without_reuse_every_repetition_exports_its_own(tmp_path):
    reps = _repetitions(_sweep(tmp_path, False, ["onnxruntime"]))
    assert len(reps) == 2 and all("artifact" not in r.details for _, r in reps)
    assert all(r.startup_ms is not None for _, r in reps)


@pytest.mark.slow
def test_inductor_repetitions_share_the_cells_kernel_cache(reused_sweep):
    reps = [r for _, r in _of(reused_sweep, ("inductor",))]
    assert [r.status in MEASURED_STATUSES for r in reps] == [True, True], reps[0].reason
    assert [reused(r.details) for r in reps] == [False, True]
    assert reps[0].details["cache_dir"] == reps[1].details["cache_dir"]


def test_later_repetitions_load_the_trace_and_the_reference_and_still_verify(reused_sweep):
    reps = _of(reused_sweep, ("eager", "torchscript"))
    by = {(b, r.repetition): r for b, r in reps}
    assert all(r.status in MEASURED_STATUSES and r.verification.ok for r in by.values())
    assert by["eager", 0].details["reference"] == "computed"
    assert by["eager", 1].details["reference"].startswith("reused")
    # Exactly the saved arrays: eager against its own reloaded reference differs by nothing.
    assert by["eager", 1].verification.max_abs_err == 0
    assert [reused(by["torchscript", i].details) for i in (0, 1)] == [False, True]
