"""Python's own standard library as a text corpus for causal language models.

Why this corpus: every machine that runs stackcost has it, nothing is downloaded, it is
real text written by people (code, docstrings, comments), and it is fixed for a given
Python version, so a run names its text by `sys.version` and a digest of what it read.
About 12 MB in 3.11 once the test suites are left out (their files hold odd encodings and
generated data, not the library).

- Files: every `*.py` under `sysconfig.get_path("stdlib")`, without `site-packages` and the
  test directories, ordered by the SHA-256 of their relative path (a fixed shuffle).
- Held out by file: a file whose path hashes to 0 mod 10 is test text, never trained on.
- Tokenizer: byte-level BPE (`tokenizers`) trained on the training files only, to the
  model's vocabulary size, with one special token, `<|endoftext|>`, between files.
- Samples: blocks of `context + 1` consecutive tokens (stride `context`); the model reads
  the first `context` and is scored on the next token at every position.

numpy and the standard library at import; `tokenizers` is imported when a tokenizer is
trained.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stackcost.data.base import DatasetMissing

NAME = "stdlib-text"
END_OF_TEXT = "<|endoftext|>"
HELD_OUT_EVERY = 10  # a file whose path's hash is 0 mod this is test text
# The tokenizer learns its merges from this much training text (in the files' fixed
# order): enough for a few thousand merges, a second or two on one core.
TOKENIZER_CHARS = 2_000_000
# Bytes (256) and the special token, plus room for merges worth learning.
MIN_VOCAB = 320
# Blocks per split unless --limit says otherwise: encoding runs at about 1 MB of text a
# second on one core, so the whole library (11 MB) is asked for, not the default. Held-out
# blocks are scored every epoch, and never more than MAX_TEST_BLOCKS.
TRAIN_BLOCKS = 4096
MAX_TEST_BLOCKS = 256
_SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test"})


@dataclass(frozen=True)
class Corpus:
    """The corpus's files, split; `root` is the standard library's directory."""

    root: Path
    train: tuple[Path, ...]
    test: tuple[Path, ...]

    def describe(self) -> str:
        return f"Python {sys.version.split()[0]} standard library, {self.root}"


def _path_hash(relative: str) -> bytes:
    return hashlib.sha256(relative.encode()).digest()


def corpus(root: Path | None = None) -> Corpus:
    """The standard library's sources, split by file; DatasetMissing (one line) when this
    Python ships none (some minimal images keep only bytecode)."""
    root = Path(root or sysconfig.get_path("stdlib"))
    files = [
        p
        for p in root.rglob("*.py")
        if not _SKIPPED_DIRS.intersection(p.relative_to(root).parts[:-1])
    ]
    if not files:
        raise DatasetMissing(
            f"{NAME}: no *.py sources under {root} (this Python ships bytecode only); "
            "install its standard-library sources (e.g. Debian's libpython3-stdlib)"
        )
    files.sort(key=lambda p: _path_hash(p.relative_to(root).as_posix()))
    train, test = [], []
    for p in files:
        held_out = _path_hash(p.relative_to(root).as_posix())[0] % HELD_OUT_EVERY == 0
        (test if held_out else train).append(p)
    return Corpus(root, tuple(train), tuple(test))


def _texts(files: tuple[Path, ...]) -> Iterator[str]:
    """Each file's text; a file that is not UTF-8 is left out (none in 3.11's library)."""
    for p in files:
        try:
            yield p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue


def train_tokenizer(corpus: Corpus, vocab_size: int) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` of exactly `vocab_size` ids at most, learnt
    from the first TOKENIZER_CHARS of the training files (never the held-out ones)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < MIN_VOCAB:
        raise ValueError(
            f"{NAME}: a vocabulary of {vocab_size} ids leaves no room for BPE merges beside "
            f"the 256 bytes; give the model at least {MIN_VOCAB} (e.g. -c vocab_size=2048)"
        )

    def text() -> Iterator[str]:
        left = TOKENIZER_CHARS
        for t in _texts(corpus.train):
            if left <= 0:
                return
            yield t[:left]
            left -= len(t)

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(text(), trainer)
    return tokenizer


def blocks(tokenizer: Any, files: tuple[Path, ...], context: int, count: int | None) -> np.ndarray:
    """(n, context + 1) int64 token blocks from `files` in order, each file followed by
    `<|endoftext|>`, consecutive blocks overlapping by one token; `count` keeps the first
    n (all when None). Files are encoded only until `count` blocks are full."""
    eos = tokenizer.token_to_id(END_OF_TEXT)
    ids: list[int] = []
    want = None if count is None else count * context + 1
    for t in _texts(files):
        ids.extend(tokenizer.encode(t).ids)
        ids.append(eos)
        if want is not None and len(ids) >= want:
            break
    n = (len(ids) - 1) // context
    if count is not None:
        n = min(n, count)
    tokens = np.asarray(ids[: n * context + 1], dtype=np.int64)
    index = np.arange(n)[:, None] * context + np.arange(context + 1)[None, :]
    return tokens[index]


def digest(tokenizer: Any, root: Path, files: tuple[Path, ...]) -> str:
    """What the text was: the tokenizer's JSON and every file's relative path and bytes."""
    h = hashlib.sha256(tokenizer.to_str().encode())
    for p in files:
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]
