"""A stackcost rung's own check of a cell (Backend.why_not) decides in the parent, before a
worker starts: a model the Keras rungs have no definition of is `unsupported` there."""

from __future__ import annotations

import pytest

from stackcost.execute.probe import ask
from stackcost.execute.runner import why_not_runnable
from stackcost.runspec.run import model_ref, validate


def test_a_model_a_rung_cannot_build_is_refused_without_a_worker():
    pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    spec = validate(
        {"models": [model_ref("resnet18"), model_ref("llama-tiny")], "backends": ["keras"]}
    )
    facts = ask([], {"keras": {}}, {}, 60.0).facts
    verdicts = {c.model.name: why_not_runnable(c, facts) for c in spec.cells()}
    assert verdicts["resnet18"] is None
    status, reason = verdicts["llama-tiny"]
    assert status == "unsupported"
    assert reason.startswith("no Keras definition of llama-tiny (defined: ")


def test_a_backend_without_its_own_check_is_judged_by_its_capabilities():
    from stackcost.backends.base import BackendFacts

    facts = ask([], {"keras": {}}, {}, 60.0).facts["keras"]
    plain = BackendFacts(
        ok=True, reason="", modes=facts.modes, devices=facts.devices, precisions=facts.precisions
    )
    cell = validate({"models": [model_ref("llama-tiny")], "backends": ["keras"]}).cells()[0]
    assert facts.why_not(cell) is not None and plain.why_not(cell) is None
