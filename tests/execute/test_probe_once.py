"""The probe of user code runs once per `run` and per `sweep`, where the run starts; viewing
stored results (report, report --suite, compare, history) never probes and never reads
this machine's environment (issue 25)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from stackcost import env
from stackcost.cli import main
from stackcost.errors import SpecError
from stackcost.execute import probe
from stackcost.runspec.suite import load_suite
from stackcost.store.database import Store
from tests.store.test_database import _result

FAST = ["--min-time", "0.01", "--max-time", "0.1", "--repeats", "1", "--quiet"]
# A model and a backend in user code: before, validation asked about each in a child of
# its own and the runner asked about the backend again (three children).
FACTORY = "tests.factories:tiny"
CUSTOM = "tests.execute.fake_backends:EnvBackend"
# A user's Workload with a classification head: what `train` takes from user code.
TRAINABLE = "examples.token_model:WORKLOAD"


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command line of every probe child started in this process."""
    started: list[list[str]] = []

    def run(args: list[str], **kw: object) -> subprocess.CompletedProcess:
        started.append(list(args))
        return subprocess.run(args, **kw)  # type: ignore[call-overload]

    shim = SimpleNamespace(
        run=run, TimeoutExpired=subprocess.TimeoutExpired, DEVNULL=subprocess.DEVNULL
    )
    monkeypatch.setattr(probe, "subprocess", shim)
    return started


def test_run_probes_once(tmp_path: Path, spawns: list[list[str]], capsys):
    db = tmp_path / "s.db"
    argv = ["run", "--model", FACTORY, "--input-shape", "4", "--backends", f"eager,{CUSTOM}"]
    assert main([*argv, "--threads", "1", *FAST, "--db", str(db)]) == 0, capsys.readouterr()
    assert len(spawns) == 1 and spawns[0][1:3] == ["-m", probe.__name__]


def test_sweep_probes_once_and_its_resume_once_more(tmp_path: Path, spawns, capsys):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        f"models: [{{name: '{FACTORY}', input_shape: [4]}}]\n"
        f"backends: [eager, '{CUSTOM}']\nbatch_sizes: 1\nthreads: 1\nrepeats: 1\n"
        "protocol: {min_time_s: 0.01, max_time_s: 0.1}\n"
    )
    db = str(tmp_path / "s.db")
    assert main(["sweep", str(spec), "--db", db, "--quiet"]) == 0, capsys.readouterr()
    assert len(spawns) == 1
    # A resume is a sweep of its own: one more child, and it finds the same run (the
    # learned workload is part of the spec's digest, as when validation learned it).
    assert main(["sweep", str(spec), "--db", db, "--quiet"]) == 0
    assert len(spawns) == 2 and "resuming run" in capsys.readouterr().err
    with Store(db, read_only=True) as store:
        assert len(store.run_ids()) == 1


def test_train_probes_once(tmp_path: Path, spawns: list[list[str]], capsys):
    # Before: the model as the spec was built, the backends as they were checked, and the
    # backends again as the run started (three children).
    argv = ["train", TRAINABLE, "--seq-len", "4", "--backends", f"eager,{CUSTOM}"]
    fast = ["--limit", "16", "--batch-size", "8", "--epochs", "1", "--threads", "1", "--quiet"]
    assert main([*argv, *fast, "--db", str(tmp_path / "t.db")]) == 0, capsys.readouterr()
    assert len(spawns) == 1 and spawns[0][1:3] == ["-m", probe.__name__]


def test_a_zoo_model_on_stackcosts_backends_starts_no_child(tmp_path: Path, spawns, capsys):
    argv = ["run", "mlp", "--backends", "eager", "--resolution", "8", "--threads", "1"]
    assert main([*argv, *FAST, "--db", str(tmp_path / "s.db")]) == 0, capsys.readouterr()
    assert spawns == []


def test_unusable_user_code_is_refused_before_a_store_exists(tmp_path: Path, spawns, capsys):
    db = tmp_path / "new.db"
    argv = ["run", "mlp", "--backends", "no_such_module_xyz:Backend", "--threads", "1"]
    assert main([*argv, *FAST, "--db", str(db)]) == 2
    assert "no_such_module_xyz" in capsys.readouterr().err
    assert len(spawns) == 1 and not db.exists() and list(tmp_path.iterdir()) == []


# -- views --------------------------------------------------------------------------


@pytest.fixture
def no_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A view that asks for a probe or this machine's environment fails the test."""

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a view probed or read this machine's environment")

    monkeypatch.setattr(probe, "probe", refuse)
    monkeypatch.setattr(probe, "subprocess", SimpleNamespace(run=refuse))
    monkeypatch.setattr(env, "fingerprint", refuse)
    monkeypatch.setattr(env, "collect", refuse)


def _suite_store(
    db: Path, machines: dict[str, int], suite_file: str = "tiny"
) -> dict[str, list[str]]:
    """The suite (default: tiny) as if measured on each machine (name -> its CPUs, the
    threads it ran with), in that order: the run ids per machine, one per suite entry."""
    suite = load_suite(suite_file)
    ids: dict[str, list[str]] = {}
    with Store(db) as store:
        for machine, threads in machines.items():
            for spec in suite.specs:
                spec = spec.model_copy(update={"threads": [threads]})
                env_data = {"hostname": machine, "cpu": {"logical_cores": threads}}
                run_id = store.create_run(
                    spec.model_dump(mode="json"), env_data, "stackcost suite tiny",
                    spec.digest(), f"fingerprint of {machine}",
                )  # fmt: skip
                for cell in spec.cells():
                    cell_id = store.add_cell(run_id, cell)
                    store.add_repetition(cell_id, _result([1_000, 1_100, 1_050]))
                store.finish_run(run_id)
                ids.setdefault(machine, []).append(run_id)
    return ids


def test_views_never_probe_nor_read_this_machine(tmp_path: Path, no_machine, capsys):
    db = tmp_path / "s.db"
    ids = _suite_store(db, {"box-a": 64, "box-b": 3})
    latest = ids["box-b"]
    assert main(["report", "--suite", "tiny", "--db", str(db), "--format", "md"]) == 0
    md = capsys.readouterr().out
    # Each entry's latest run, measured elsewhere, with threads this machine may not have.
    assert all(r in md for r in latest) and not any(r in md for r in ids["box-a"])
    assert main(["report", "--db", str(db), "--all", "--format", "md"]) == 0
    assert main(["compare", ids["box-a"][0], latest[0], "--db", str(db)]) in (0, 1)
    assert main(["history", "--db", str(db)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_the_suite_summary_finds_runs_of_the_suite_and_no_other(tmp_path: Path, no_machine):
    from stackcost.report.frames.suite import stored_runs

    db = tmp_path / "s.db"
    ids = _suite_store(db, {"here": 1})
    suite = load_suite("tiny")
    with Store(db) as store:  # another suite's spec: other backends
        other = suite.specs[0].model_copy(update={"backends": ["eager"]})
        store.create_run(other.model_dump(mode="json"), {}, "stackcost suite other")
        store.create_run({"model": {"name": "mlp"}}, {}, "stackcost train mlp")
    found = stored_runs(suite, db)
    assert [r.run_id for r in found.runs] == ids["here"] and found.missing == []
    assert found.labels == ["mlp b1 8 px", "mnist-cnn b1 28 px"]
    found = stored_runs(load_suite("tiny", backends=["onnxruntime"]), db)
    assert found.runs == [] and found.missing == found.labels and len(found.labels) == 2


def test_a_suite_pinned_to_more_cpus_than_this_machine_has_is_viewed_here(
    tmp_path: Path, no_machine, monkeypatch: pytest.MonkeyPatch, capsys
):
    file = tmp_path / "suite-pinned.yaml"
    file.write_text("models: [{name: mlp, size: 8}]\nbackends: [eager]\nthreads: 2\n")
    db = tmp_path / "s.db"
    monkeypatch.setattr(env, "cores", lambda: 4)  # measured on a machine of 4 CPUs
    ids = _suite_store(db, {"big": 2}, str(file))["big"]
    monkeypatch.setattr(env, "cores", lambda: 1)  # read on a machine of 1
    # Measuring here is refused as before: 2 threads on 1 CPU measure the scheduler.
    with pytest.raises(SpecError, match="threads 2 is more than the 1 CPUs"):
        load_suite(str(file))
    assert main(["suite", str(file), "--db", str(tmp_path / "new.db")]) == 2
    assert "threads 2 is more than" in capsys.readouterr().err
    # Viewing its stored runs is not: nothing of this machine applies to them.
    page = tmp_path / "suite.html"
    assert main(["report", "--suite", str(file), "--db", str(db), "-o", str(page)]) == 0
    assert "<h2>Suite pinned</h2>" in page.read_text()
    assert main(["suite", str(file), "--db", str(db), "--summary-only"]) == 0
    assert f"from 1 stored runs in {db}: {ids[0]}" in capsys.readouterr().out
