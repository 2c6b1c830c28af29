"""Edges that were once accepted, or refused only after work was done: each is now one
line, exit 2, no traceback, and no store (issue 39, "Edges left open")."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackcost.errors import SpecError
from stackcost.runspec.grammar import split_list
from tests.test_refusals_files import refused

RUN = ["run", "mlp", "--backends", "eager", "--resolution", "8", "--threads", "1", "--quiet"]


def refused_and_nothing_stored(
    argv: list[str], capsys: pytest.CaptureFixture[str], directory: Path
) -> str:
    """`refused`, with a store path that must still not exist afterwards."""
    db = directory / "s.db"
    err = refused([*argv, "--db", str(db)], capsys, directory)
    assert not db.exists() and not list(directory.glob("s.db*")), err
    return err


# -- an empty item in a comma list --------------------------------------------------------


def with_flag(flag: str, value: str) -> list[str]:
    """RUN with `flag` set to `value` in place of its own value, if it has one."""
    argv = list(RUN)
    if flag in argv:
        del argv[argv.index(flag) : argv.index(flag) + 2]
    return [*argv, flag, value]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (with_flag("--precision", "fp32,,int8"),
         "precision 'fp32,,int8': empty item at position 2; give a comma-separated list such "
         "as fp32,int8"),
        (with_flag("--batch-size", "1,,8"), "batch size '1,,8': empty item at position 2"),
        (with_flag("--backends", "eager,,onnxruntime"),
         "--backends 'eager,,onnxruntime': empty item at position 2"),
        (with_flag("--threads", "1,"), "threads '1,': empty item at position 2"),
        (with_flag("--resolution", ",8"), "resolution ',8': empty item at position 1"),
        (with_flag("--device", "cpu,,cuda"), "device 'cpu,,cuda': empty item at position 2"),
        (with_flag("--scenario", "timed-loop,,server"),
         "--scenario 'timed-loop,,server': empty item at position 2"),
        (["sweep", "--models", "mlp,,resnet18"], "--models 'mlp,,resnet18': empty item at position 2"),
        (["train", "mlp", "--backends", "eager,,inductor"],
         "--backends 'eager,,inductor': empty item at position 2"),
        (["heldout", "mnist-cnn", "--precision", "fp32,,int8"],
         "precision 'fp32,,int8': empty item at position 2"),
        (["suite", "tiny", "--precisions", "fp32,,int8"],
         "--precisions 'fp32,,int8': empty item at position 2"),
    ],
)  # fmt: skip
def test_an_empty_item_in_a_comma_list_is_refused(capsys, tmp_path, argv, needle):
    err = refused_and_nothing_stored(argv, capsys, tmp_path)
    assert needle in err, err


def test_an_empty_item_in_a_spec_files_list_is_refused(capsys, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text('models: [mlp]\nbackends: [eager]\nthreads: 1\nbatch_sizes: "1,,8"\n')
    err = refused_and_nothing_stored(["sweep", str(spec)], capsys, tmp_path)
    assert "spec.yaml:4: batch_sizes: batch size '1,,8': empty item at position 2" in err, err


def test_the_message_suggests_the_list_without_its_empty_items():
    assert split_list(" fp32 , int8 ", "precision", "x") == ["fp32", "int8"]
    with pytest.raises(SpecError, match="at position 3; give a comma-separated list such as a,b$"):
        split_list("a,b,", "--x", "e,f")
    with pytest.raises(SpecError, match="at position 1; give a comma-separated list such as e,f$"):
        split_list(" , ", "--x", "e,f")


# -- generate on a mixture of experts: refused in the parent, from its config ---------------

# Tiny, so the probe's meta-device build is quick; nothing is downloaded (zoo/hf.py).
TINY_MIXTRAL = [
    "-c", "vocab_size=64", "-c", "hidden_size=32", "-c", "intermediate_size=32",
    "-c", "num_hidden_layers=1", "-c", "num_attention_heads=2", "-c", "num_key_value_heads=1",
    "-c", "num_local_experts=2", "-c", "max_position_embeddings=64",
]  # fmt: skip


def test_generate_refuses_a_mixture_of_experts_before_any_worker(capsys, tmp_path, monkeypatch):
    from stackcost.execute import local

    def no_worker(*args, **kwargs):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(local.LocalExecutor, "session", no_worker)
    argv = ["run", "hf:mixtral", "--head", "causal-lm", *TINY_MIXTRAL, "--scenario", "generate"]
    err = refused_and_nothing_stored([*argv, "--backends", "eager", "--quiet"], capsys, tmp_path)
    assert (
        "--scenario generate: hf:mixtral is a mixture of experts (num_local_experts=2): with "
        "random weights its router's choices are meaningless" in err
    ), err


def test_generate_refuses_a_learned_model_without_an_lm_head(capsys, tmp_path):
    argv = ["run", "hf:bert", "-c", "num_hidden_layers=1", "--scenario", "generate"]
    err = refused_and_nothing_stored([*argv, "--backends", "eager", "--quiet"], capsys, tmp_path)
    assert "--scenario generate needs a decoder with its LM head, and hf:bert is not one" in err


# -- ab: a side's interpreter is probed before anything runs --------------------------------


def script(directory: Path, name: str, body: str) -> str:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    "body",
    ["exit 0", "echo hello", "echo 'stackcost 0.1.0' >&2; exit 1"],
    ids=["true", "chatty", "fails"],
)
def test_ab_refuses_an_interpreter_that_is_not_a_python_with_stackcost(
    capsys, tmp_path, tmp_path_factory, body
):
    fake = script(tmp_path_factory.mktemp("bin"), "python", body)
    argv = ["ab", "mlp", "--backends", "eager", "--threads", "1", "--cand", fake, "--quiet"]
    err = refused_and_nothing_stored(argv, capsys, tmp_path)
    assert f"--cand '{fake}' is not a Python interpreter with stackcost" in err, err


def test_ab_refuses_bin_true(capsys, tmp_path):
    argv = ["ab", "mlp", "--backends", "eager", "--threads", "1", "--base", "/bin/true"]
    err = refused_and_nothing_stored([*argv, "--quiet"], capsys, tmp_path)
    assert "--base '/bin/true' is not a Python interpreter with stackcost" in err, err


# -- heldout: a model not fed images is refused from the zoo's table -------------------------


def test_heldout_refuses_a_text_model_on_images_without_a_probe(capsys, tmp_path, monkeypatch):
    from stackcost.execute import probe

    def no_probe(*args, **kwargs):
        raise AssertionError("a probe child was started")

    monkeypatch.setattr(probe, "probe", no_probe)
    argv = ["heldout", "bert-base", "--dataset", "digits", "--weights-dir", str(tmp_path / "w")]
    err = refused_and_nothing_stored(argv, capsys, tmp_path)
    assert (
        "--dataset digits: bert-base is fed input_ids (int64), attention_mask (int64), not images"
        in err
    ), err
    assert not (tmp_path / "w").exists()
