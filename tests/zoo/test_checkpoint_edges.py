"""A checkpoint folder whose files are hostile is refused as flags are validated: one line
naming the file and what is allowed, within seconds, nothing stored. A FIFO, device, socket
or directory where a file should be; a config.json too big or nested too deep for json; a
tokenizer.json that does not load (zoo/checkpoint.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stackcost.errors import SpecError
from stackcost.runspec.run import model_ref
from stackcost.zoo.checkpoint import CONFIG_BYTES, INDEX_BYTES, JSON_DEPTH, TOKENIZER_BYTES
from tests.test_refusals_edges import refused_and_nothing_stored
from tests.zoo.test_checkpoint import save_llama, save_tokenizer  # skips without transformers

SECONDS = 10  # each refusal takes well under a second; generous for a loaded machine


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A whole checkpoint with its tokenizer, copied by each test before it breaks it."""
    folder = tmp_path_factory.mktemp("saved") / "llama"
    save_llama(folder)
    save_tokenizer(folder)
    return folder


@pytest.fixture
def folder(saved, tmp_path) -> Path:
    return Path(shutil.copytree(saved, tmp_path / "ckpt"))


# Opens each FIFO named after it for reading and writing (which never waits) and closes it,
# again and again from SECONDS on: that lets a reader blocked opening it go on to an end.
RELEASE = f'sleep {SECONDS}; while :; do for f; do : <> "$f"; done; sleep 0.1; done'


def within(call: Callable[[], Any], fifos: tuple[Path, ...] = ()) -> Any:
    """`call`'s result (or its exception), which must come within SECONDS. A regression
    that opens one of the `fifos` would block for ever, and safetensors blocks holding the
    GIL, so no thread of this process could end it: a helper process releases the FIFOs,
    and the test fails on the time taken instead of hanging."""
    helper = subprocess.Popen(["sh", "-c", RELEASE, "sh", *map(str, fifos)]) if fifos else None
    start = time.monotonic()
    try:
        return call()
    finally:
        if helper is not None:
            helper.kill()
            helper.wait()
        took = time.monotonic() - start
        assert took < SECONDS, f"took {took:.1f} s, over {SECONDS} s"


def fifos(folder: Path) -> tuple[Path, ...]:
    return tuple(p for p in folder.glob("*") if p.is_fifo())


def refused(folder: Path, needle: str, **kw: Any) -> str:
    """model_ref's SpecError for `folder`, one line holding `needle` and the folder."""
    with pytest.raises(SpecError) as caught:
        within(lambda: model_ref(f"hf:{folder}", **kw), fifos(folder))
    message = str(caught.value)
    assert needle in message and str(folder) in message and "\n" not in message, message
    return message


def replace(path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put a `kind` of thing where the file `path` was."""
    path.unlink(missing_ok=True)
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "character device":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        path.symlink_to("/dev/zero")
    elif kind == "socket":
        monkeypatch.chdir(path.parent)  # a relative name: a socket's path has a short limit
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)
    elif kind == "link to nothing":
        path.symlink_to(path.parent / "absent")
    else:
        raise AssertionError(kind)


def write_sparse(path: Path, size: int) -> None:
    """A file of `size` zero bytes that takes no disk space and no time to write."""
    path.unlink(missing_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


def nested(levels: int) -> str:
    """A config whose value nests `levels` arrays and objects in all, itself included."""
    return '{"model_type": "llama", "x": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


# -- config.json --------------------------------------------------------------------------


def test_a_config_json_over_its_bound_is_refused_unread(folder):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "pad": "x" * CONFIG_BYTES}))
    refused(folder, "config.json is 16.0 MiB, over the 16 MiB bound on a config.json")
    write_sparse(folder / "config.json", 4 * CONFIG_BYTES)
    refused(folder, "config.json is 64.0 MiB, over the 16 MiB bound")


@pytest.mark.parametrize("kind", ["FIFO", "directory", "socket", "link to nothing"])
def test_a_config_json_that_is_not_a_file_is_refused_unopened(folder, kind, monkeypatch):
    replace(folder / "config.json", kind, monkeypatch)
    refused(folder, f"config.json is not a regular file (a {kind})")


def test_a_config_json_nested_too_deep_for_json_is_refused(folder):
    config = folder / "config.json"
    needle = f"config.json nests arrays and objects deeper than {JSON_DEPTH} levels"
    for text in ("[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000,
                 nested(JSON_DEPTH + 1)):  # fmt: skip
        config.write_text(text)
        refused(folder, needle)
    half = CONFIG_BYTES // 2  # as deep as the size bound allows: refused as fast
    config.write_text("[" * half + "]" * half)
    start = time.monotonic()
    refused(folder, needle)
    assert time.monotonic() - start < SECONDS
    config.write_text(nested(JSON_DEPTH))  # the bound itself is a config
    assert model_ref(f"hf:{folder}").checkpoint["config"]["model_type"] == "llama"


# -- the weights --------------------------------------------------------------------------

KINDS = ["FIFO", "directory", "character device", "socket", "link to nothing"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_weight_file_that_is_not_a_regular_file_is_refused_unopened(folder, kind, monkeypatch):
    replace(folder / "model.safetensors", kind, monkeypatch)
    refused(folder, f"model.safetensors is not a regular file (a {kind}); a checkpoint's files")


def test_links_to_regular_files_are_a_checkpoint_as_in_the_hugging_face_cache(folder, tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    for file in sorted(folder.iterdir()):
        file.rename(blobs / file.name)
        file.symlink_to(blobs / file.name)
    ref = within(lambda: model_ref(f"hf:{folder}"))
    assert list(ref.checkpoint["files"]) == ["model.safetensors"]
    (folder / "model.safetensors").unlink()  # and a link to a FIFO is not
    os.mkfifo(tmp_path / "fifo")
    (folder / "model.safetensors").symlink_to(tmp_path / "fifo")
    with pytest.raises(SpecError, match=r"model.safetensors is not a regular file \(a FIFO\)"):
        within(lambda: model_ref(f"hf:{folder}"), (tmp_path / "fifo",))


def test_trusted_pickle_weights_and_a_shard_index_must_be_regular_files(folder, monkeypatch):
    index = folder / "model.safetensors.index.json"
    replace(index, "FIFO", monkeypatch)
    refused(folder, "model.safetensors.index.json is not a regular file (a FIFO)")
    write_sparse(index, INDEX_BYTES + 1)
    refused(folder, "model.safetensors.index.json is 64.0 MiB, over the 64 MiB bound")
    index.unlink()
    (folder / "model.safetensors").unlink()
    replace(folder / "pytorch_model.bin", "FIFO", monkeypatch)
    refused(folder, "pytorch_model.bin is not a regular file (a FIFO)", trust_pickle=True)


# -- the tokenizer ------------------------------------------------------------------------


def test_a_tokenizer_json_that_does_not_load_is_refused(folder, monkeypatch):
    tokenizer = folder / "tokenizer.json"
    tokenizer.write_text('{"model": 3}')
    refused(folder, "tokenizer.json does not load (data did not match any variant")
    tokenizer.write_text("not\n  json")
    message = refused(folder, "tokenizer.json does not load (")
    assert len(message) < len(str(folder)) + 260, message
    write_sparse(tokenizer, TOKENIZER_BYTES + 1)
    refused(folder, "tokenizer.json is 256.0 MiB, over the 256 MiB bound on a tokenizer.json")
    replace(tokenizer, "FIFO", monkeypatch)
    refused(folder, "tokenizer.json is not a regular file (a FIFO)")
    tokenizer.unlink()  # not every model has one
    assert within(lambda: model_ref(f"hf:{folder}")).checkpoint["config"]["model_type"]


def test_the_tokenizer_config_and_side_files_must_be_regular_and_json(folder, monkeypatch):
    config = folder / "tokenizer_config.json"
    config.write_text("{'single': 'quotes'}")
    refused(folder, "tokenizer_config.json is not JSON (Expecting property name")
    config.write_text("[" * 100_000 + "]" * 100_000)
    refused(folder, f"tokenizer_config.json nests arrays and objects deeper than {JSON_DEPTH}")
    replace(config, "FIFO", monkeypatch)
    refused(folder, "tokenizer_config.json is not a regular file (a FIFO)")
    config.unlink()
    replace(folder / "generation_config.json", "directory", monkeypatch)
    refused(folder, "generation_config.json is not a regular file (a directory)")


# -- through the CLI ----------------------------------------------------------------------


def fifo_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")


def deep_config(folder: Path) -> None:
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)


def huge_config(folder: Path) -> None:
    write_sparse(folder / "config.json", CONFIG_BYTES + 1)


def broken_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").write_text('{"model": 3}')


@pytest.mark.parametrize(
    "breaks, needle",
    [(fifo_weights, "model.safetensors is not a regular file (a FIFO)"),
     (deep_config, f"config.json nests arrays and objects deeper than {JSON_DEPTH} levels"),
     (huge_config, "config.json is 16.0 MiB, over the 16 MiB bound"),
     (broken_tokenizer, "tokenizer.json does not load (")],
)  # fmt: skip
def test_the_cli_refuses_each_in_one_line_within_seconds_and_stores_nothing(
    folder, tmp_path, capsys, breaks, needle
):
    breaks(folder)
    # The smallest of runs, should a regression let one start.
    argv = ["run", f"hf:{folder}", "--backends", "eager", "--threads", "1", "--min-time", "0"]
    argv += ["--max-time", "0.1", "--repeats", "1", "--quiet"]
    start = time.monotonic()
    err = within(lambda: refused_and_nothing_stored(argv, capsys, tmp_path), fifos(folder))
    assert time.monotonic() - start < SECONDS
    assert needle in err, err
