"""The standard library as a text corpus: split by file, a tokenizer learnt from the
training files only, token blocks labelled with their next tokens."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest

from stackcost.data import DATASETS, DatasetMissing
from stackcost.data import stdlib_text as text

pytest.importorskip("tokenizers")


def small_library(root: Path, files: int = 40) -> Path:
    """A stand-in standard library: a few modules, a test package and site-packages."""
    for i in range(files):
        body = "".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n\n" for j in range(30))
        (root / f"mod{i}.py").write_text(f'"""Module {i}."""\n\n{body}')
    for skipped in ("test", "site-packages/pkg"):
        (root / skipped).mkdir(parents=True)
        (root / skipped / "ignored.py").write_text("SECRET = 'never read'\n")
    return root


def test_the_split_is_by_file_fixed_and_leaves_the_test_suites_out(tmp_path):
    corpus = text.corpus(small_library(tmp_path))
    train, test = set(corpus.train), set(corpus.test)
    assert train and test and not train & test
    assert len(train | test) == 40  # test/ and site-packages/ are not the library
    assert text.corpus(tmp_path) == corpus  # the same order and split every time
    real = text.corpus()
    assert Path(sysconfig.get_path("stdlib")) == real.root
    assert 0.05 < len(real.test) / (len(real.train) + len(real.test)) < 0.15
    assert not any("site-packages" in p.parts for p in real.train)


def test_the_tokenizer_is_learnt_from_training_files_only_and_is_reproducible(tmp_path):
    corpus = text.corpus(small_library(tmp_path))
    first = text.train_tokenizer(corpus, 400)
    assert first.get_vocab_size() <= 400
    assert first.to_str() == text.train_tokenizer(corpus, 400).to_str()
    assert first.token_to_id(text.END_OF_TEXT) is not None
    sample = "def f(x):\n    return x  # é\n"
    assert first.decode(first.encode(sample).ids) == sample  # byte-level: nothing lost


def test_blocks_are_consecutive_tokens_whose_last_is_the_next_ones_first(tmp_path):
    corpus = text.corpus(small_library(tmp_path))
    tokenizer = text.train_tokenizer(corpus, 400)
    every = text.blocks(tokenizer, corpus.train, 16, None)
    assert every.dtype == np.int64 and every.shape[1] == 17
    assert (every[1:, 0] == every[:-1, -1]).all()  # stride 16: inputs and labels chain
    few = text.blocks(tokenizer, corpus.train, 16, 3)
    assert few.shape == (3, 17) and (few == every[:3]).all()
    assert every.max() < tokenizer.get_vocab_size()


def test_bad_corpora_and_vocabularies_are_one_line(tmp_path):
    with pytest.raises(DatasetMissing, match="no \\*.py sources"):
        text.corpus(tmp_path)
    corpus = text.corpus(small_library(tmp_path))
    with pytest.raises(ValueError, match="-c vocab_size="):
        text.train_tokenizer(corpus, 256)
    assert DATASETS[text.NAME].fed == "text" and DATASETS["digits"].fed == "images"
