"""The worker's environment: a whitelist, stackcost's thread settings, --inherit-env."""

from __future__ import annotations

import pytest

from stackcost.errors import SpecError
from stackcost.execute.environ import recorded, worker_environ
from stackcost.execute.runner import execute
from stackcost.runspec.grammar import check_env_names
from stackcost.runspec.run import RunSpec, model_ref
from stackcost.store.database import Store
from stackcost.store.runs import RunResult
from tests.conftest import FAST

ENV = "tests.execute.fake_backends:EnvBackend"


def test_whitelist_own_settings_and_inherited_names():
    parent = {
        "PATH": "/bin",
        "LC_ALL": "C",
        "KMP_AFFINITY": "compact",
        "DNNL_VERBOSE": "1",
        "OMP_NUM_THREADS": "8",
        "MINE": "x",
    }
    env = worker_environ(parent, {"OMP_NUM_THREADS": "2"}, ["MINE"])
    assert env == {"PATH": "/bin", "LC_ALL": "C", "OMP_NUM_THREADS": "2", "MINE": "x"}
    assert recorded(env) == {"MINE": "x", "OMP_NUM_THREADS": "2", "PATH": "/bin"}


def test_a_narrowed_isa_reaches_the_workers_and_is_recorded():
    parent = {"PATH": "/bin", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    env = worker_environ(parent, {})
    assert env == parent
    assert recorded(env)["ONEDNN_MAX_CPU_ISA"] == "AVX2"


def test_names_are_checked():
    assert check_env_names(["OK_NAME", "_x1"]) is None
    assert "not an environment variable name" in check_env_names(["1BAD"])
    assert "'A=B'" in check_env_names(["A=B"])


def run_env_cell(tmp_path, executor, inherit: list[str]) -> RunResult:
    spec = RunSpec(
        models=[model_ref("mlp")],
        backends=[ENV],
        resolutions=[4],
        batch_sizes=[2],
        protocol=FAST,
        inherit_env=inherit,
    )
    with Store(tmp_path / f"s{len(inherit)}.db") as store:
        return execute(spec, store, executor=executor, on_disturbed="keep")


def test_a_stray_tuning_variable_does_not_reach_the_worker_unless_inherited(
    tmp_path, monkeypatch, warm_executor
):
    monkeypatch.setenv("KMP_AFFINITY", "granularity=fine,compact")
    monkeypatch.setenv("STACKCOST_TEST_PASSED", "yes")
    plain = run_env_cell(tmp_path, warm_executor, [])
    seen = plain.records[0][1].details["seen_env"]
    assert seen["KMP_AFFINITY"] is None and seen["STACKCOST_TEST_PASSED"] is None
    assert seen["OMP_NUM_THREADS"] == "1" and seen["PATH"]
    assert "KMP_AFFINITY" not in plain.env["worker_environ"]

    passed = run_env_cell(tmp_path, warm_executor, ["KMP_AFFINITY"])
    assert passed.records[0][1].details["seen_env"]["KMP_AFFINITY"] == "granularity=fine,compact"
    assert passed.env["worker_environ"]["KMP_AFFINITY"] == "granularity=fine,compact"


def test_a_sweep_spec_names_variables_to_inherit(tmp_path):
    from stackcost.runspec.file import load_sweep

    spec = tmp_path / "s.yaml"
    spec.write_text("models: [mlp]\nbackends: [eager]\nthreads: 1\ninherit_env: [KMP_AFFINITY]\n")
    assert load_sweep(spec).inherit_env == ["KMP_AFFINITY"]
    spec.write_text("models: [mlp]\nbackends: [eager]\nthreads: 1\ninherit_env: ['A=B']\n")
    with pytest.raises(SpecError, match="not an environment variable name"):
        load_sweep(spec)
