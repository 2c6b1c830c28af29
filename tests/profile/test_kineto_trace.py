"""Kineto chrome traces as a C++ program writes them: a hand-written one, and torch's own."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
import torch

from stackcost.profile.breakdown import CPU_PARTS
from stackcost.profile.kineto_trace import kineto_breakdown, read_trace
from stackcost.profile.torch_profile import STEP_MARK, WARMUP_MARK, _op_events, cpu_breakdown
from tests.profile.nets import conv_net

# Absolute microseconds with ns digits, as Kineto writes them: more digits than a float
# keeps exactly, so a child ending with its parent only nests when parsed exactly.
BASE_US = Decimal("4466793185945.573")

# One iteration, offsets in us from its start: (category, name, thread, start, end).
ITERATION = [
    ("user_annotation", STEP_MARK, 1, 0, 100),
    # a wrapper chain: only the leaf's self time (minus the allocation) is kernel time
    ("cpu_op", "aten::conv2d", 1, 10, 60),
    ("cpu_op", "aten::convolution", 1, 12, 60),  # ends with its parent
    ("cpu_op", "aten::mkldnn_convolution", 1, 15, 55),
    ("cpu_op", "aten::empty", 1, 16, 18),
    # a wrapper that called nothing did the work itself
    ("cpu_op", "aten::relu", 1, 60, 70),
    # a TorchScript frame: its self time is the unrecorded part
    ("cpu_op", "forward", 1, 70, 95),
    ("cpu_op", "aten::add", 1, 80, 85),
    ("cpu_op", "aten::add", 1, 81, 84),  # a redispatch: merged into its parent, as torch does
    # another thread at the same time as the convolution: counted once in the union
    ("cpu_op", "aten::mul", 2, 20, 30),
]
ITERS = 2
PERIOD_US = 110  # one marked iteration every 110 us: 10 us per iteration outside the marks


def _x(cat: str, name: str, tid: int, start: Decimal, end: Decimal) -> str:
    # Written by hand: json.dumps would round these timestamps through a float.
    return (
        f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 7, "tid": {tid}, '
        f'"ts": {start}, "dur": {end - start}}}'
    )


def _trace(path: Path, iterations: int = ITERS, warmup: bool = True) -> Path:
    events = ['{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {}}']
    events.append(_x("Trace", "PyTorch Profiler (0)", 0, BASE_US - 50, BASE_US + 1000))
    events.append('{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 1}')
    if warmup:  # before the marked iterations: its ops must not count
        events.append(_x("user_annotation", WARMUP_MARK, 1, BASE_US - 40, BASE_US - 10))
        events.append(_x("cpu_op", "aten::addmm", 1, BASE_US - 35, BASE_US - 15))
    for i in range(iterations):
        t0 = BASE_US + i * PERIOD_US
        events.extend(_x(c, n, tid, t0 + s, t0 + e) for c, n, tid, s, e in ITERATION)
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + "\n]}")
    return path


def _answer(path: Path, iters: int = ITERS) -> dict:
    details = {"profile_iters": iters, "profile_wall_ns": iters * PERIOD_US * 1000}
    return {"profile_path": path, "details": {**details, "device": "cpu"}}


def test_nesting_is_rebuilt_per_thread(tmp_path):
    events = {(e.name, e.start_us): e for e in read_trace(_trace(tmp_path / "t.json", 1))}
    start = float(BASE_US)
    conv = events[("aten::convolution", start + 12)]
    assert len(conv.children) == 1 and conv.self_us == pytest.approx(8)
    assert events[("aten::conv2d", start + 10)].self_us == pytest.approx(2)
    assert events[("aten::mkldnn_convolution", start + 15)].self_us == pytest.approx(38)
    assert events[("forward", start + 70)].self_us == pytest.approx(20)
    assert events[("aten::add", start + 80)].self_us == pytest.approx(5)
    assert ("aten::add", start + 81) not in events
    assert not events[("aten::mul", start + 20)].children  # thread 2: nobody's child
    assert len(events[(STEP_MARK, start)].children) == 3  # conv2d, relu, forward
    assert ("PyTorch Profiler (0)", start - 50) not in events  # the session span


def test_parts_follow_the_torch_profiler_classification(tmp_path):
    b = kineto_breakdown(_answer(_trace(tmp_path / "t.json")), unprofiled_ms=0.08)
    # per iteration: kernels 38 (conv minus empty) + 10 (relu) + 5 (add); mul overlaps
    assert b.parts_ms["kernels"] == pytest.approx(0.053)
    assert b.parts_ms[CPU_PARTS[2]] == pytest.approx(0.020)  # forward's self time
    assert b.parts_ms["overhead"] == pytest.approx(0.027)  # wrappers, empty, marker self
    assert b.wall_ms == pytest.approx(0.110)
    assert b.remainder_ms == pytest.approx(0.010)  # outside the marks
    assert not b.check()  # 9% of the wall: the caller notes it
    assert b.iters == ITERS and b.unprofiled_wall_ms == 0.08
    assert "Kineto" in b.method
    assert any("+38%" in n for n in b.notes), b.notes  # (0.110 - 0.08) / 0.08
    rows = {r.name: r for r in b.top_ops}
    assert rows["aten::mkldnn_convolution"].calls == ITERS
    assert rows["aten::mkldnn_convolution"].self_ms == pytest.approx(ITERS * 0.038)
    assert rows["aten::add"].calls == ITERS
    assert "aten::addmm" not in rows  # warm-up
    assert STEP_MARK not in rows


def test_a_gpu_answer_says_its_times_are_host_side(tmp_path):
    answer = _answer(_trace(tmp_path / "t.json"))
    answer["details"]["device"] = "cuda"
    assert any("host-side" in n for n in kineto_breakdown(answer, None).notes)


def test_what_cannot_be_read_raises_one_line(tmp_path):
    with pytest.raises(RuntimeError, match="cannot read the Kineto trace"):
        kineto_breakdown(_answer(tmp_path / "missing.json"), None)
    (tmp_path / "bad.json").write_text('{"traceEvents": [')
    with pytest.raises(RuntimeError, match="cannot read the Kineto trace"):
        kineto_breakdown(_answer(tmp_path / "bad.json"), None)
    with pytest.raises(RuntimeError, match="no 'stackcost.step' ranges"):
        kineto_breakdown(_answer(_trace(tmp_path / "t.json", iterations=0)), None)
    with pytest.raises(RuntimeError, match="no profiled pass"):
        kineto_breakdown({"details": {"device": "cpu"}}, None)


def test_torchs_own_trace_splits_like_its_events(tmp_path):
    """torch.profiler's exported trace, read back, gives the split of its FunctionEvents."""
    from torch.profiler import ProfilerActivity, profile, record_function

    net, x = conv_net(), torch.randn(1, 3, 32, 32)
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with record_function(STEP_MARK):
                net(x)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    args = {"iters": 3, "wall_ms": 1.0, "unprofiled_ms": None, "method": "m"}
    from_trace = cpu_breakdown(read_trace(tmp_path / "trace.json"), **args)
    from_events = cpu_breakdown(_op_events(prof.events()), **args)
    assert from_trace.parts_ms.keys() == from_events.parts_ms.keys()
    for part, ms in from_events.parts_ms.items():
        assert from_trace.parts_ms[part] == pytest.approx(ms, abs=1e-5), part
    assert [(r.name, r.calls) for r in from_trace.top_ops] == [
        (r.name, r.calls) for r in from_events.top_ops
    ]
