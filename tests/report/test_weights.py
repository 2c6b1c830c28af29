"""The captions say which weights a cell had (issue 61, item 4): seeded random, or a
checkpoint's own with its digest; 'random weights make near-ties' only where true."""

from __future__ import annotations

from stackcost.cell import ModelRef
from stackcost.report.frames.generate import caption
from stackcost.report.frames.weights import weights_lines

RANDOM = ModelRef(name="llama-tiny", seed=3)
CHECKPOINT = ModelRef(
    name="hf:/models/qwen2",
    num_classes=0,
    checkpoint={"files": {"model.safetensors": "ab" * 32}, "config": {"model_type": "qwen2"}},
)


def test_each_model_is_named_with_its_weights_once():
    lines = weights_lines([RANDOM, CHECKPOINT, RANDOM])
    assert lines == [
        "weights of llama-tiny: seeded random (seed 3, torch-default init)",
        "weights of hf:/models/qwen2: its checkpoint's own (model.safetensors sha256 abababababab)",
    ]


def test_near_ties_are_blamed_on_random_weights_only_where_every_cell_had_them():
    assert "random weights make near-ties" in caption([RANDOM])
    trained = caption([CHECKPOINT])
    assert "random weights" not in trained and "sha256 abababababab" in trained
    assert "random weights make near-ties" not in caption([RANDOM, CHECKPOINT])
