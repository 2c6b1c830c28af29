"""The Ray executor on a real two-node cluster on this machine (head without CPUs, two
nodes of one CPU each): repetitions side by side on distinct pinned cores, undisturbed by
each other, a node killed mid-sweep, and resume across executors."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time

import psutil
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from stackcost.cli import main  # noqa: E402
from stackcost.env import collect, fingerprint  # noqa: E402
from stackcost.execute.cores import CoreLock  # noqa: E402
from stackcost.execute.machine_lock import MachineLock  # noqa: E402
from stackcost.execute.ray_executor import RayExecutor  # noqa: E402
from stackcost.execute.runner import execute  # noqa: E402
from stackcost.measure.counters import Edge, Window, system_busy_s  # noqa: E402
from stackcost.measure.disturbance import assess  # noqa: E402
from stackcost.measure.protocol import Protocol  # noqa: E402
from stackcost.runspec.run import RunSpec, model_ref  # noqa: E402
from stackcost.store.database import Store  # noqa: E402

# A cluster of nodes on this machine: every core, never a one-core test lane.
pytestmark = pytest.mark.whole_machine
TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
QUICK = Protocol(min_time_s=0.2, max_time_s=0.4, warmup_max_time_s=0.1, min_iters=5)
# 1 s in prepare, after its import: time to kill the node 0.5 s after its worker is seen
SLOW = "tests.execute.fake_backends:BriefStartBackend"


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, logging_level="ERROR")
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def spec(backends=("eager",), batches=(1, 2), repeats=2) -> RunSpec:
    return RunSpec(
        models=[model_ref("mlp")],
        backends=list(backends),
        resolutions=[4],
        batch_sizes=list(batches),
        threads=[1],
        repeats=repeats,
        protocol=QUICK,
    )


def stored(db) -> list[tuple]:
    """(backend, batch, repetition index, status) of every stored repetition."""
    return (
        sqlite3.connect(db)
        .execute(
            "SELECT c.backend, c.batch_size, r.repetition, r.status FROM repetitions r"
            " JOIN cells c ON c.id = r.cell_id ORDER BY r.id"
        )
        .fetchall()
    )


def once_each(db) -> bool:
    """Every (cell, repetition index) stored once, a disturbed try a retry replaced aside."""
    final = [(b, n, i) for b, n, i, s in stored(db) if s != "disturbed"]
    return len(final) == len(set(final))


# -- cores, pinning, disturbance (no Ray) ------------------------------------------------
@TWO_CPUS
def test_core_locks_give_distinct_cores_and_the_machine_lock_excludes_them(tmp_path):
    machine = tmp_path / "machine.lock"
    first = CoreLock(1, machine_lock=machine, directory=tmp_path)
    second = CoreLock(1, machine_lock=machine, directory=tmp_path)
    with first.held() as a, second.held() as b:
        assert len(a) == len(b) == 1 and a != b
        assert MachineLock(machine).busy() is not None  # a local run waits for them
    with MachineLock(machine).held():  # and they for a local run
        assert first._try_take() is None


@TWO_CPUS
def test_a_pinned_process_counts_only_its_cores_as_disturbance():
    """Robust to a shared machine: others' load lands on both counts alike."""
    # A session of its own: not this process's family, whose CPU counts as its own.
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(burner.pid, {1})
        os.sched_setaffinity(0, {0})
        time.sleep(0.3)
        everywhere, mine = system_busy_s(), system_busy_s(frozenset({0}))
        time.sleep(1.0)
        everywhere, mine = system_busy_s() - everywhere, system_busy_s(frozenset({0})) - mine
        os.sched_setaffinity(burner.pid, {0})
        time.sleep(0.3)
        first = Edge.now()  # pinned: counts core 0 only
        time.sleep(1.0)
        on_mine = assess(Window.between(first, Edge.now()))
    finally:
        os.sched_setaffinity(0, before)
        burner.kill()
        burner.wait()
    assert everywhere - mine >= 0.8  # the burner's core: only the all-CPU count sees it
    assert on_mine.disturbed and on_mine.others_cores >= 0.4, on_mine
    assert on_mine.threshold_cores < 0.25 + 2 * 2 * 0.01 / 1.0  # slack for one CPU, not two


def test_a_plan_fills_the_hole_an_out_of_order_interrupted_run_left():
    """Ray finished repetition 1 before 0, then the run was stopped: resume runs 0 and 2."""
    from stackcost.execute.plan import Plan
    from stackcost.result import RepetitionResult

    three = spec(batches=(1,), repeats=3)
    plan = Plan(three)
    (cell,) = plan.grid()
    plan.observe(cell, RepetitionResult(status="ok", repetition=1))
    assert sorted(rep for _, rep in plan.next_cells()) == [0, 2]


# -- on the cluster ------------------------------------------------------------------------
@TWO_CPUS
def test_a_sweep_runs_on_both_nodes_pinned_undisturbed_each_repetition_once(cluster, tmp_path):
    views = []
    with Store(tmp_path / "s.db") as store:
        result = execute(spec(), store, executor=RayExecutor(on_change=views.append))
    reps = [rep for _, rep in result.records]
    assert len(reps) == 4 and once_each(tmp_path / "s.db")
    # Quiet cluster: Ray's own processes and the neighbour on the other core do not count.
    assert all(rep.status in ("ok", "unstable") for rep in reps), [r.reason for r in reps]
    assert len({rep.node.node_id for rep in reps}) == 2  # both nodes measured
    assert all(len(rep.node.cores) == 1 for rep in reps)
    assert {rep.host for rep in reps} == {collect()["hostname"]}
    here = fingerprint(collect())  # one machine: every node's environment is the driver's
    assert {rep.node.env_fingerprint for rep in reps} == {here}
    assert views and views[0].nodes == 3
    spans = [(rep.started_at, rep.finished_at) for rep in reps]
    assert any(a[0] < b[1] and b[0] < a[1] for a in spans for b in spans if a != b)  # together


def test_cli_sweep_on_ray_and_bad_executor_input(cluster, tmp_path, capsys):
    db = tmp_path / "c.db"
    args = ["sweep", "--models", "mlp", "--backends", "eager", "--resolution", "4"]
    args += ["--batch-size", "1", "--threads", "1", "--min-time", "0.05", "--max-time", "0.3"]
    assert main([*args, "--db", str(db), "--executor", "ray", "--quiet"]) == 0
    assert len(stored(db)) >= 1
    bad = tmp_path / "bad.db"
    for flags in (["--executor", "dask"], ["--executor", "ray", "--ray-address", "nowhere"]):
        capsys.readouterr()
        assert main([*args, "--db", str(bad), *flags]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and flags[-1] in err, err
    assert not bad.exists()


def test_resume_across_executors(cluster, tmp_path, warm_executor):
    """Started locally, finished on Ray; started on Ray, finished locally: one run each."""
    for first, then in ((warm_executor, RayExecutor()), (RayExecutor(), warm_executor)):
        db = tmp_path / f"{type(first).__name__}.db"

        def stop_after_one(cell, result, done, total):
            raise KeyboardInterrupt

        three = spec(batches=(1,), repeats=3)
        with Store(db) as store, pytest.raises(KeyboardInterrupt):
            execute(three, store, executor=first, on_result=stop_after_one)
        with Store(db) as store:
            result = execute(three, store, executor=then, resume=True)
        assert sqlite3.connect(db).execute("SELECT count(*) FROM runs").fetchone()[0] == 1
        assert len(result.records) == 3 and once_each(db)
        on_ray = [rep.node is not None for _, rep in result.records]
        assert any(on_ray) and not all(on_ray)
        assert all(rep.host for _, rep in result.records)


def _measuring_node(cluster) -> object | None:
    """A worker node whose raylet has a stackcost worker process under it, measuring."""
    for node in cluster.worker_nodes:
        raylet = node.all_processes["raylet"][0].process.pid
        for child in psutil.Process(raylet).children(recursive=True):
            try:
                if "stackcost.execute.worker" in " ".join(child.cmdline()):
                    return node
            except psutil.NoSuchProcess:
                continue
    return None


def test_a_node_killed_mid_sweep_is_retried_elsewhere_and_nothing_is_stored_twice(
    cluster, tmp_path
):
    killed: list[object] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            node = _measuring_node(cluster)
            if node is not None:
                time.sleep(0.5)  # well inside the worker's import and 1 s prepare
                cluster.remove_node(node, allow_graceful=False)
                killed.append(node)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_one)
    killer.start()
    try:
        with Store(tmp_path / "s.db") as store:
            result = execute(spec(backends=[SLOW], repeats=2), store, executor=RayExecutor())
    finally:
        killer.join()
    assert killed, "no node was measuring"
    reps = [rep for _, rep in result.records]
    assert len(reps) == 4 and once_each(tmp_path / "s.db")
    assert all(rep.status in ("ok", "unstable") for rep in reps), [r.reason for r in reps]
    retried = [rep for rep in reps if rep.lost_attempts]
    assert len(retried) == 1, [rep.lost_attempts for rep in reps]
    (lost,) = retried[0].lost_attempts
    assert lost.node_id == killed[0].node_id or lost.node_id is None, lost
    assert retried[0].node.node_id != lost.node_id  # it ran again on the surviving node
