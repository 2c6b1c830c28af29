"""The workload contract: inputs drawn from the seed, any size axis, several named inputs."""

from __future__ import annotations

import pytest
import torch

import stackcost
from stackcost.cell import Cell, ModelRef
from stackcost.errors import SpecError
from stackcost.result import MEASURED_STATUSES
from stackcost.workload import SIZE_AXES, Input, Workload, make_example

FAST = dict(protocol={"min_time_s": 0.05, "max_time_s": 0.5, "warmup_max_time_s": 0.3})
TOKENS = "examples.token_model:WORKLOAD"


def _workload() -> Workload:
    return Workload(
        "w", "test", "x:y",
        inputs=(
            Input("ids", ("batch", "seq_len"), "int64", "ids", high=7),
            Input("mask", ("batch", "seq_len"), "int64", "mask"),
            Input("dense", ("batch", 3)),
        ),
        sizes={"seq_len": 5}, maximum={"seq_len": 8}, keyword=True,
    )  # fmt: skip


def test_inputs_follow_the_seed_stay_in_the_vocabulary_and_masks_are_valid() -> None:
    ref = ModelRef(name="w", seed=3)
    a = make_example(_workload(), ref, 4, {"seq_len": 6})
    b = make_example(_workload(), ref, 4, {"seq_len": 6})
    c = make_example(_workload(), ModelRef(name="w", seed=4), 4, {"seq_len": 6})
    ids, mask, dense = a.tensors
    assert ids.dtype == torch.int64 and ids.shape == (4, 6) and ids.min() >= 0 and ids.max() < 7
    assert mask.dtype == torch.int64 and bool((mask == 1).all())
    assert dense.dtype == torch.float32 and dense.shape == (4, 3)
    assert all(torch.equal(x, y) for x, y in zip(a.tensors, b.tensors, strict=True))
    assert not torch.equal(a.tensors[2], c.tensors[2])
    assert set(a.kwargs) == {"ids", "mask", "dense"} and a.args == ()
    assert a.record()["ids"] == "int64[4, 6]"


def test_a_single_image_input_is_what_image_models_were_always_fed() -> None:
    from stackcost import zoo

    ref = ModelRef(name="mlp", in_channels=1, seed=0)
    example = make_example(zoo.model_info("mlp"), ref, 2, {"resolution": 5})
    old = torch.randn(2, 1, 5, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(example.tensors[0], old)


def test_size_problems_name_the_axis_its_unit_and_the_bound() -> None:
    w = _workload()
    assert w.size_problem("seq_len", 9) == "seq_len 9 is too large for w (maximum 8 tokens)"
    assert w.size_problem("resolution", 9) == (
        "--resolution does not apply to w (its size axes: --seq-len)"
    )
    assert SIZE_AXES["seq_len"].label == "seq len (tokens)"


def test_cell_keys_of_image_cells_are_unchanged_and_sequences_say_their_axis() -> None:
    image = Cell(model=ModelRef(name="resnet18"), backend="eager", resolution=64)
    # The key of this cell before size axes became general (commit a7ea1eb).
    assert image.key() == "54e30d69a787613a"
    seq = Cell(model=ModelRef(name="bert-base"), backend="eager", sizes={"seq_len": 128})
    assert seq.resolution is None and seq.size_label() == "128 tokens"
    assert "128tok" in seq.label() and "px" not in seq.label()
    assert Cell.model_validate_json(seq.model_dump_json()).key() == seq.key()


def test_a_size_flag_that_applies_to_no_model_is_refused(tmp_path) -> None:
    with pytest.raises(SpecError, match="--seq-len does not apply to mlp"):
        stackcost.run("mlp", ["eager"], sizes={"seq_len": [8]}, db=tmp_path / "s.db")
    assert not (tmp_path / "s.db").exists()


def test_a_token_id_model_runs_through_the_python_rungs(tmp_path, monkeypatch) -> None:
    """The bring-your-own example (docs/guides/your-model.md): int64 token ids and a mask, two outputs."""
    monkeypatch.chdir(__import__("pathlib").Path(__file__).parents[1])
    result = stackcost.run(
        TOKENS,
        ["eager", "torchscript", "onnxruntime", "openvino"],
        sizes={"seq_len": [6]},
        batch_sizes=[2],
        threads=[1],
        db=tmp_path / "s.db",
        **FAST,
    )
    for c in result.cells():
        assert c.status in MEASURED_STATUSES, (c.cell.backend, c.status, c.reason)
        for r in c.repetitions:
            v = r.verification
            assert [o.name for o in v.outputs] == ["0", "1"], c.cell.backend
            assert v.ok and v.max_rel_err <= 1e-4
    assert {c.cell.sizes["seq_len"] for c in result.cells()} == {6}
