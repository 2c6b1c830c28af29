"""A checkpoint folder on disk as a model: what is in it, whether it is whole, what it holds.

`--model hf:./path/to/folder` (any `hf:` name with a `/` in it) names a folder that
transformers' `save_pretrained` wrote: `config.json` and the weights in safetensors
(`model.safetensors`, or shards beside `model.safetensors.index.json`). It is loaded
offline, never downloaded (`local_files_only`).

- Each file the run opens by name (config, weights, shard index, tokenizer files, generation
  config) must be a regular file or a link to one: a FIFO, device, socket or directory in
  its place is refused before anything is opened (opening a FIFO waits for a writer).
- `config.json` and `tokenizer_config.json` are read only under a size bound and parsed
  only when they nest no deeper than JSON_DEPTH (Python's json recurses per level).
- A `tokenizer.json`, when there is one, must load with the `tokenizers` library, so that a
  broken one is refused here rather than found by a worker as a failed cell.
- safetensors is read through the `safetensors` library, which maps tensors by the offsets
  its header declares and refuses a file shorter than they say (a truncated copy).
- A pickle checkpoint (`pytorch_model.bin`) runs code when it is loaded, so it is refused
  unless the user says `--trust-pickle` (ModelRef.trust_pickle); transformers 5's
  `save_pretrained` writes safetensors.
- The run records where the weights came from (`ModelRef.checkpoint`): the folder's path,
  each weight file's sha256, and the config. They are part of the cell's identity, so a
  folder whose files changed is a different model, never the same cell.

Nothing here imports torch or transformers: the CLI inspects a folder as it validates the
flags. The architecture's own checks (config against weights) run in the probe (zoo/hf.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from stackcost.zoo.custom import ZooError

CONFIG = "config.json"
SAFETENSORS = ".safetensors"
PICKLE_SHARDS = "pytorch_model*.bin"  # pytorch_model.bin, or its shards -00001-of-00002
INDEX = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# Other files transformers or a generation rung opens (or copies) when they are present.
SIDE_FILES = (
    "special_tokens_map.json", "added_tokens.json", "tokenizer.model", "vocab.json",
    "merges.txt", "generation_config.json",
)  # fmt: skip
MIB = 1 << 20
CHUNK = MIB
# Bounds far above any real file, so only a hostile or mistaken one meets them: a config
# with ImageNet-21k's id2label is ~1 MiB; a model's shard index lists its tensors (~10 MiB
# for the largest); a tokenizer_config's added tokens and chat template stay a few MiB;
# the largest tokenizer.json files (256k-id vocabularies) are ~35 MiB.
CONFIG_BYTES = 16 * MIB
INDEX_BYTES = 64 * MIB
TOKENIZER_CONFIG_BYTES = 64 * MIB
TOKENIZER_BYTES = 256 * MIB
JSON_DEPTH = 64  # a config nests 3 or 4 levels; Python's json recurses once per level
REASON_CHARS = 200


def is_checkpoint_name(rest: str) -> bool:
    """Whether what follows `hf:` names a folder (a path) rather than a model type."""
    return "/" in rest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
)  # fmt: skip


def _regular(path: Path) -> int:
    """The size of `path`, a regular file or a link to one; ZooError naming what it is
    otherwise. Only stat is called: opening a FIFO waits for a writer, and reading a
    device such as /dev/zero never ends."""
    try:
        found = os.stat(path)  # follows links: the Hugging Face cache is made of them
    except FileNotFoundError:
        kind = "a link to nothing"  # the caller saw the name: a dangling link
    except OSError as exc:
        kind = f"unreadable: {exc.strerror}"
    else:
        if stat.S_ISREG(found.st_mode):
            return found.st_size
        kind = next((kind for test, kind in KINDS if test(found.st_mode)), "not a file")
    raise ZooError(
        f"checkpoint {path.parent}: {path.name} is not a regular file ({kind}); a "
        "checkpoint's files must be regular files or links to them"
    )


def _bounded(path: Path, bound: int) -> int:
    """`_regular`, and its size within `bound` bytes."""
    size = _regular(path)
    if size > bound:
        raise ZooError(
            f"checkpoint {path.parent}: {path.name} is {size / MIB:.1f} MiB, over the "
            f"{bound // MIB} MiB bound on a {path.name} (real ones are far smaller)"
        )
    return size


def _deeper_than(value: Any, bound: int) -> bool:
    """Whether parsed JSON nests more than `bound` arrays and objects, level by level
    (no recursion: a deep value is what this guards against)."""
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > bound:
            return True
        inner: list[Any] = []
        for item in level:
            inner.extend(item.values() if isinstance(item, dict) else item)
        level = [item for item in inner if isinstance(item, (dict, list))]
    return False


def _read_json(path: Path, bound: int) -> Any:
    """A regular JSON file of at most `bound` bytes nesting at most JSON_DEPTH levels,
    parsed; ZooError (one line) otherwise."""
    _bounded(path, bound)
    with path.open("rb") as f:
        data = f.read(bound + 1)  # the file may have grown since it was measured
    where = f"checkpoint {path.parent}: {path.name}"
    if len(data) > bound:
        raise ZooError(f"{where} is over the {bound // MIB} MiB bound on a {path.name}")
    deep = ZooError(
        f"{where} nests arrays and objects deeper than {JSON_DEPTH} levels, the bound "
        "on a Hugging Face file (a config nests 3 or 4)"
    )
    try:
        # CPython's json raises RecursionError past the interpreter's recursion limit;
        # depths under it are measured on the parsed value.
        value = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise deep from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZooError(f"{where} is not JSON ({_one_line(exc)})") from None
    if isinstance(value, (dict, list)) and _deeper_than(value, JSON_DEPTH):
        raise deep
    return value


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line, cut to REASON_CHARS."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def _check_tokenizer(folder: Path) -> None:
    """The folder's tokenizer files, where present: each a regular file, its
    tokenizer_config JSON, and its tokenizer.json loadable by `tokenizers` (what the
    generation rungs load); ZooError (one line) otherwise."""
    for name in SIDE_FILES:
        if os.path.lexists(folder / name):
            _regular(folder / name)
    if os.path.lexists(folder / TOKENIZER_CONFIG):
        _read_json(folder / TOKENIZER_CONFIG, TOKENIZER_CONFIG_BYTES)
    path = folder / TOKENIZER
    if not os.path.lexists(path):
        return  # not every model has one
    _bounded(path, TOKENIZER_BYTES)
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the generation rungs that read it need it; without it, none runs
        return
    try:
        Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception with serde's reason
        raise ZooError(
            f"checkpoint {folder}: {TOKENIZER} does not load ({_one_line(exc)})"
        ) from None


def weight_files(folder: Path, trust_pickle: bool = False) -> list[Path]:
    """The folder's weight files in name order: safetensors, or with `trust_pickle` a
    pickle's shards when that is all it has; ZooError when it has none it may load, or
    when one is not a regular file (nothing is opened before that is known)."""
    files = sorted(folder.glob("*" + SAFETENSORS))
    if files:
        for file in files:
            _regular(file)
        return files
    pickles = sorted(folder.glob(PICKLE_SHARDS))
    if pickles and trust_pickle:
        for file in pickles:
            _regular(file)
        return pickles
    if pickles:
        raise ZooError(
            f"checkpoint {folder}: its weights are a pickle ({pickles[0].name}), which runs "
            "code when loaded; load and save the model again with save_pretrained (it writes "
            "safetensors), or pass --trust-pickle if you trust the file"
        )
    raise ZooError(f"checkpoint {folder}: no weights (*.safetensors) in the folder")


def tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in one weight file: a safetensors file's header (no data), or
    a trusted pickle loaded memory-mapped; ZooError naming the file when it is not whole."""
    if path.suffix != SAFETENSORS:
        import torch

        state = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
        return {key: tuple(t.shape) for key, t in state.items()}
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118
    except Exception as exc:  # safetensors' SafetensorError: an incomplete or foreign file
        text = " ".join(str(exc).split())
        raise ZooError(
            f"checkpoint {path.parent}: {path.name} is not a whole safetensors file ({text})"
        ) from None


def inspect(folder: str | Path, trust_pickle: bool = False) -> dict[str, Any]:
    """The record a run keeps of a checkpoint folder: its weight files' sha256 and its
    config. ZooError (one line) when the folder is not a checkpoint; a file it would open
    is not a regular file; its config is over CONFIG_BYTES, nests too deep or is not JSON;
    a weight file is a pickle (unless trusted), truncated or not safetensors; or its
    tokenizer files do not load."""
    path = Path(folder)
    if not path.is_dir():
        raise ZooError(f"checkpoint {folder}: no such folder")
    config_file = path / CONFIG
    if not os.path.lexists(config_file):
        raise ZooError(
            f"checkpoint {folder}: not a checkpoint folder (no {CONFIG}; save_pretrained "
            "writes one beside the weights)"
        )
    config = _read_json(config_file, CONFIG_BYTES)
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ZooError(f"checkpoint {folder}: {CONFIG} names no model_type")
    files = weight_files(path, trust_pickle)
    if os.path.lexists(path / INDEX):  # read by transformers to find the shards
        _bounded(path / INDEX, INDEX_BYTES)
    for file in files:
        if file.suffix == SAFETENSORS:  # a header only; a pickle is not opened here
            tensor_shapes(file)  # refuses a truncated file, before anything is written
    _check_tokenizer(path)  # before the weights are hashed, the slow part
    return {"files": {f.name: _sha256(f) for f in files}, "config": config}


def shapes(folder: str | Path, trust_pickle: bool = False) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape across the folder's weight files."""
    found: dict[str, tuple[int, ...]] = {}
    for file in weight_files(Path(folder), trust_pickle):
        found.update(tensor_shapes(file))
    return found
