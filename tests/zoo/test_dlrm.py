"""dlrm-small: shape, size, determinism, and the same math as EmbeddingBag(mode="sum")."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from stackcost.cell import ModelRef
from stackcost.workload import make_example
from stackcost.zoo import build_model, weights_digest, workload_of

REF = ModelRef(name="dlrm-small", num_classes=0)


def example(batch: int = 4):
    w = workload_of(REF)
    return make_example(w, REF, batch, {})


def test_shape_size_and_inputs() -> None:
    model = build_model(REF, {})
    assert sum(p.numel() for p in model.parameters()) == 145_041
    ex = example()
    dense, sparse = ex.tensors
    assert dense.shape == (4, 13) and dense.dtype == torch.float32
    assert sparse.shape == (4, 8, 4) and sparse.dtype == torch.int64
    assert int(sparse.min()) >= 0 and int(sparse.max()) < 1000
    with torch.inference_mode():
        out = ex.call(model)
    assert out.shape == (4, 1) and torch.isfinite(out).all()
    assert not model.training


def test_deterministic_and_seeded() -> None:
    a, b = build_model(REF, {}), build_model(REF, {})
    assert weights_digest(a) == weights_digest(b)
    assert list(a.state_dict()) == list(b.state_dict())
    assert "pairs" not in a.state_dict()  # the interaction index is not a weight
    other = build_model(REF.model_copy(update={"seed": 1}), {})
    assert weights_digest(other) != weights_digest(a)


def test_tables_are_sum_pooled_bags() -> None:
    """Embedding + sum over the bag is what EmbeddingBag(mode="sum") computes."""
    model = build_model(REF, {})
    sparse = example().tensors[1]
    for k, table in enumerate(model.tables):
        bag = nn.EmbeddingBag.from_pretrained(table.weight, mode="sum")
        assert torch.allclose(table(sparse[:, k]).sum(1), bag(sparse[:, k]), atol=1e-6)


def test_interactions_are_the_upper_triangle() -> None:
    model = build_model(REF, {})
    dense, sparse = example(2).tensors
    x = model.bottom(dense)
    t = torch.stack([x] + [tb(sparse[:, k]).sum(1) for k, tb in enumerate(model.tables)], 1)
    z = t @ t.transpose(1, 2)
    dots = torch.stack([z[:, i, j] for i in range(9) for j in range(i + 1, 9)], dim=1)
    with torch.inference_mode():
        want = model.top(torch.cat([x, dots], dim=1))
        assert torch.allclose(model(dense, sparse), want, atol=1e-5)


def test_trace_matches_eager() -> None:
    model = build_model(REF, {})
    ex = example()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, ex.args)
        assert torch.allclose(traced(*ex.args), model(*ex.args), rtol=1e-5, atol=1e-6)


def test_onnx_graph_has_no_loops(tmp_path: Path) -> None:
    """Why the tables are not EmbeddingBags: the dynamo exporter writes those as ONNX Loops
    (one iteration per bag), which OpenVINO cannot convert. Gather + ReduceSum it can."""
    pytest.importorskip("onnxscript")
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from stackcost.backends.onnx_export import export_onnx

    model, ex = build_model(REF, {}), example()
    path = tmp_path / "onnx" / "model.onnx"
    export_onnx(model, ex, path, "dynamo")
    ops = Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    assert "Loop" not in ops and ops["ReduceSum"] == 8
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {n: t.numpy() for n, t in ex.named().items()})
    with torch.inference_mode():
        want = ex.call(model).numpy()
    assert abs(got - want).max() <= 1e-4 * abs(want).max()
