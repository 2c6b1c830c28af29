"""Each repetition runs in its own process: crashes, hangs and errors become results."""

from stackcost.execute.local import LocalExecutor
from stackcost.execute.runner import execute
from stackcost.result import MEASURED_STATUSES
from stackcost.runspec.run import RunSpec, model_ref
from stackcost.store.database import Store
from stackcost.store.runs import superseded_dropped
from tests.conftest import FAST, tiny_task

FAKE = "tests.execute.fake_backends"


def test_eager_repetition_succeeds_and_is_verified(tmp_path):
    r = LocalExecutor().run(tiny_task(tmp_path))
    assert r.status in MEASURED_STATUSES, r.reason + r.log_tail
    assert r.verification.ok and r.verification.max_abs_err == 0
    assert r.stats.n >= 5 and len(r.samples_ns) == r.stats.n
    assert r.memory.peak_rss_bytes >= r.memory.baseline_rss_bytes > 0
    assert r.phases.spawn_s is not None and r.weights_digest


def test_abort_is_recorded_as_crashed(tmp_path):
    r = LocalExecutor().run(tiny_task(tmp_path, f"{FAKE}:AbortBackend"))
    assert r.status == "crashed" and "SIGABRT" in r.reason


def test_hang_is_killed_at_the_timeout(tmp_path):
    # A cold worker: its spawn and import (about 3.6 s here) count against the timeout.
    r = LocalExecutor().run(tiny_task(tmp_path, f"{FAKE}:HangBackend", timeout_s=5))
    assert r.status == "timeout" and "5 s" in r.reason


def test_exception_is_recorded_with_its_message(tmp_path):
    r = LocalExecutor().run(tiny_task(tmp_path, f"{FAKE}:RaiseBackend"))
    assert r.status == "failed" and "kernel not implemented" in r.reason
    assert "Traceback" in r.log_tail


def test_verification_catches_a_wrong_backend(tmp_path):
    r = LocalExecutor().run(tiny_task(tmp_path, f"{FAKE}:WrongBackend"))
    assert r.status == "wrong" and not r.valid
    assert r.verification.max_rel_err > 1e-3 and "tolerance" in r.reason


def test_run_goes_on_after_crash_and_hang(tmp_path, warm_executor):
    spec = RunSpec(
        models=[model_ref("mlp")],
        backends=[f"{FAKE}:AbortBackend", f"{FAKE}:HangBackend", "eager"],
        resolutions=[4],
        batch_sizes=[2],
        protocol=FAST,
        timeout_s=4,  # forked warm: the hang waits 4 s, an eager repetition takes about 1
    )
    with Store(tmp_path / "s.db") as store:
        result = execute(spec, store, executor=warm_executor)
    by_backend = {c.cell.backend.split(":")[-1]: c.status for c in result.cells()}
    assert by_backend["AbortBackend"] == "crashed"
    assert by_backend["HangBackend"] == "timeout"
    assert by_backend["eager"] in MEASURED_STATUSES
    assert result.failed
    # every repetition was committed, failures included (and any disturbed try a retry
    # replaced, which the view drops)
    with Store(tmp_path / "s.db") as store:
        assert len(superseded_dropped(list(store.repetitions(result.run_id)))) == 3
