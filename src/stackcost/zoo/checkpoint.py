"""A checkpoint folder on disk as a model: what is in it, whether it is whole, what it holds.

`--model hf:./path/to/folder` (any `hf:` name with a `/` in it) names a folder that
transformers' `save_pretrained` wrote: `config.json` and the weights in safetensors
(`model.safetensors`, or shards beside `model.safetensors.index.json`). It is loaded
offline, never downloaded (`local_files_only`).

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
from pathlib import Path
from typing import Any

from stackcost.zoo.custom import ZooError

CONFIG = "config.json"
SAFETENSORS = ".safetensors"
PICKLE_SHARDS = "pytorch_model*.bin"  # pytorch_model.bin, or its shards -00001-of-00002
CHUNK = 1 << 20


def is_checkpoint_name(rest: str) -> bool:
    """Whether what follows `hf:` names a folder (a path) rather than a model type."""
    return "/" in rest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def weight_files(folder: Path, trust_pickle: bool = False) -> list[Path]:
    """The folder's weight files in name order: safetensors, or with `trust_pickle` a
    pickle's shards when that is all it has; ZooError when it has none it may load."""
    files = sorted(folder.glob("*" + SAFETENSORS))
    if files:
        return files
    pickles = sorted(folder.glob(PICKLE_SHARDS))
    if pickles and trust_pickle:
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
    config. ZooError (one line) when the folder is not a checkpoint, its config is not
    JSON, or a weight file is a pickle (unless trusted), truncated or not safetensors."""
    path = Path(folder)
    if not path.is_dir():
        raise ZooError(f"checkpoint {folder}: no such folder")
    config_file = path / CONFIG
    if not config_file.is_file():
        raise ZooError(
            f"checkpoint {folder}: not a checkpoint folder (no {CONFIG}; save_pretrained "
            "writes one beside the weights)"
        )
    try:
        config = json.loads(config_file.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZooError(f"checkpoint {folder}: {CONFIG} is not JSON ({exc})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ZooError(f"checkpoint {folder}: {CONFIG} names no model_type")
    files = weight_files(path, trust_pickle)
    for file in files:
        if file.suffix == SAFETENSORS:  # a header only; a pickle is not opened here
            tensor_shapes(file)  # refuses a truncated file, before anything is written
    return {"files": {f.name: _sha256(f) for f in files}, "config": config}


def shapes(folder: str | Path, trust_pickle: bool = False) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape across the folder's weight files."""
    found: dict[str, tuple[int, ...]] = {}
    for file in weight_files(Path(folder), trust_pickle):
        found.update(tensor_shapes(file))
    return found
