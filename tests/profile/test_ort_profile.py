"""ONNX Runtime breakdowns: a real session on a tiny conv net, and a hand-written trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from stackcost.profile.ort_profile import breakdown_from_trace, profile_ort  # noqa: E402


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from stackcost.backends.onnx_export import export_onnx
    from stackcost.workload import Example
    from tests.profile.nets import conv_net

    net = conv_net()
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    # The legacy exporter: a fraction of a second, where dynamo takes seconds; the
    # breakdown does not depend on which exporter wrote the graph.
    export_onnx(net, Example(("input",), (torch.randn(1, 3, 64, 64),)), path, "legacy")
    return path


def test_profile_ort_splits_a_conv_net(tiny_onnx: Path, tmp_path: Path):
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)
    br = profile_ort(tiny_onnx, {"input": x}, _options(1, "all"), workdir=tmp_path, iters=10)
    assert set(br.parts_ms) == {"kernels", "overhead"}
    assert br.parts_ms["kernels"] > 0
    assert br.parts_ms["overhead"] >= 0
    assert br.check(), br.summary()
    assert any(r.name == "Conv" for r in br.top_ops), br.summary()
    assert br.unprofiled_wall_ms is not None
    assert list(tmp_path.glob("ort*.json")), "the ORT trace is kept next to the breakdown"


def test_profile_ort_rejects_unknown_opt_level(tiny_onnx: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="opt_level"):
        profile_ort(tiny_onnx, {}, _options(1, "max"), workdir=tmp_path)


def _options(threads: int, opt_level: str):
    """The onnxruntime backend's session settings, as it hands them to the profiler."""
    import onnxruntime as ort

    from stackcost.backends.ort_options import session_options

    return lambda prefix: session_options(ort, threads, opt_level, prefix)


def _ev(cat: str, name: str, ts: float, dur: float, **args) -> dict:
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, "ph": "X", "args": args}


def test_breakdown_from_a_hand_written_trace():
    # A warmup run (excluded), then two timed runs of 100 us, 50 us apart; each has two
    # nodes of 30 + 20 us inside an executor span of 90 us.
    events = [
        _ev("Session", "model_run", 0, 100),
        _ev("Node", "c_kernel_time", 10, 30, op_name="Conv"),
    ]
    for start in (150, 300):
        events += [
            _ev("Session", "model_run", start, 100),
            _ev("Session", "SequentialExecutor::Execute", start + 5, 90),
            _ev("Node", "c_kernel_time", start + 10, 30, op_name="Conv"),
            _ev("Node", "r_kernel_time", start + 50, 20, op_name="Relu"),
        ]
    # The wall: the 250 us trace span plus 10 us the trace cannot see, over 2 iterations.
    br = breakdown_from_trace(events, iters=2, wall_ms=0.130)
    assert br.parts_ms["kernels"] == pytest.approx(0.050)
    assert br.parts_ms["overhead"] == pytest.approx(0.075)
    assert br.remainder_ms == pytest.approx(0.005)
    assert [(r.name, r.calls) for r in br.top_ops] == [("Conv", 2), ("Relu", 2)]
    assert br.top_ops[0].self_ms == pytest.approx(0.060)
    assert "executor 0.040 ms" in br.notes[0]
    assert "session (checks, output allocation) 0.010 ms" in br.notes[0]
    assert "between runs 0.025 ms" in br.notes[0]


def test_a_trace_with_too_few_runs_is_an_error():
    with pytest.raises(RuntimeError, match="model_run"):
        breakdown_from_trace([_ev("Session", "model_run", 0, 10)], iters=2, wall_ms=1.0)
