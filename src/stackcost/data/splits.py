"""What a training level is fed: each split's inputs and labels, and its mini-batches.

An image model (one float (batch, C, H, W) input) reads a dataset: digits, MNIST,
CIFAR-10, ..., or seeded random images. Any other workload with a classification head
(token ids and masks, audio, dense + sparse features) trains on inputs drawn the way the
workload declares them (ids inside the vocabulary, valid masks) and seeded random labels:
a speed measurement, where accuracy means nothing. A causal language model reads text
(stdlib-text): blocks of token ids, each labelled with the next token at every position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from stackcost.data.base import Dataset
from stackcost.workload import Example, Workload, make_example

if TYPE_CHECKING:
    import torch

    from stackcost.cell import Cell

SPLITS = ("train", "test")
DRAWN = "drawn as the workload declares (make_example)"


@dataclass
class Split:
    """One split whole in memory: every input over all samples (dim 0), and the labels.

    `dataset` is the image dataset it came from: what the C++ levels write to their files.
    `tokenizer` is the text's (a `tokenizers.Tokenizer`): what a kept checkpoint ships.
    `text` records what the text was (text_splits' record), None for other data.
    """

    inputs: Example
    labels: torch.Tensor
    source: str
    scale: str  # how the stored values become the model's input
    dataset: Dataset | None = None
    tokenizer: Any = None
    text: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.labels)


def image_split(dataset: Dataset, workload: Workload) -> Split:
    import torch

    images = torch.from_numpy(dataset.images)
    inputs = Example((workload.inputs[0].name,), (images,), workload.keyword)
    scale = "uint8 / 255" if images.dtype == torch.uint8 else "as stored"
    return Split(inputs, torch.from_numpy(dataset.labels), dataset.source, scale, dataset)


def drawn_split(
    workload: Workload, cell: Cell, split: str, n: int, num_classes: int, seed: int
) -> Split:
    """n samples of the workload's own inputs, with labels uniform over the classes; each
    split from its own seed, so train and test differ and every level gets the same."""
    import torch

    state = np.random.SeedSequence([seed, SPLITS.index(split)]).generate_state(2)
    inputs = make_example(workload, cell.model, n, cell.sizes, seed=int(state[0]))
    labels = np.random.default_rng(int(state[1])).integers(0, num_classes, n, dtype=np.int64)
    return Split(inputs, torch.from_numpy(labels), "synthetic", DRAWN)


def text_splits(
    cell: Cell, workload: Workload, which: tuple[str, ...] = SPLITS
) -> dict[str, Split]:
    """The corpus's training and held-out files (the splits in `which`) as token blocks of
    the cell's context (its prompt_len), through one tokenizer learnt from the training
    files at the model's vocabulary size; --limit keeps the first N blocks of each split."""
    import sys

    import torch

    from stackcost.data import stdlib_text

    cfg = cell.train
    assert cfg is not None
    ids = next(i for i in workload.inputs if i.kind == "ids")
    context = cell.sizes["prompt_len"]
    corpus = stdlib_text.corpus()
    tokenizer = stdlib_text.train_tokenizer(corpus, int(ids.high or 0))
    most = stdlib_text.MAX_TEST_BLOCKS
    counts = {"train": cfg.limit or stdlib_text.TRAIN_BLOCKS, "test": min(cfg.limit or most, most)}
    out = {}
    files_of = {"train": corpus.train, "test": corpus.test}
    for split in which:
        files = files_of[split]
        block = torch.from_numpy(stdlib_text.blocks(tokenizer, files, context, counts[split]))
        x = block[:, :-1].contiguous()
        inputs = Example(tuple(i.name for i in workload.inputs),
                         tuple(x if i.kind == "ids" else torch.ones_like(x)
                               for i in workload.inputs), workload.keyword)  # fmt: skip
        record = {
            "corpus": stdlib_text.NAME,
            "python": sys.version.split()[0],
            "files": len(files),
            "tokens": int(block.shape[0] * context),
            "context": context,
            "vocab_size": tokenizer.get_vocab_size(),
            "held_out": f"by file: sha256(path)[0] % {stdlib_text.HELD_OUT_EVERY} == 0",
            "digest": stdlib_text.digest(tokenizer, corpus.root, files),
        }
        out[split] = Split(inputs, block[:, 1:].contiguous(), corpus.describe(),
                           "token ids; labels: the next token at every position",
                           tokenizer=tokenizer, text=record)  # fmt: skip
    return out


def load_splits(cell: Cell, workload: Workload, data_dir: str | None) -> dict[str, Split]:
    """Train and test splits for the cell: its dataset for an image model, a text corpus
    for a causal LM, else drawn."""
    from stackcost.data import DATASETS, load_dataset
    from stackcost.data.synthetic import DEFAULT_SIZES

    cfg = cell.train
    assert cfg is not None
    if DATASETS[cfg.dataset].fed == "text":
        return text_splits(cell, workload)
    image = workload.image_input
    if image is None:
        if cfg.dataset != "synthetic":
            raise ValueError(
                f"{cell.model.name} is not fed images: it trains on --dataset synthetic only"
            )
        return {
            split: drawn_split(
                workload,
                cell,
                split,
                min(cfg.limit or DEFAULT_SIZES[split], DEFAULT_SIZES[split]),
                cell.model.num_classes,
                cfg.data_seed,
            )
            for split in SPLITS
        }
    channels = image.resolve(1, cell.sizes, cell.model)[1]
    return {
        split: image_split(
            load_dataset(
                cfg.dataset,
                split,
                data_dir,
                resolution=cell.resolution,
                channels=channels,
                limit=cfg.limit,
                num_classes=cell.model.num_classes,
                seed=cfg.data_seed,
            ),
            workload,
        )
        for split in SPLITS
    }


class Batches:
    """A split's mini-batches in a seeded order per epoch, collated on demand.

    Collation (index, uint8 -> float, scale) is what the loader-wait time measures.
    """

    def __init__(self, split: Split, batch: int, drop_last: bool) -> None:
        self.split = split
        self.labels = split.labels
        self.batch, self.drop_last = batch, drop_last

    def __len__(self) -> int:
        n = len(self.labels)
        return n // self.batch if self.drop_last else -(-n // self.batch)

    def order(self, generator: torch.Generator | None) -> torch.Tensor:
        import torch

        n = len(self.labels)
        return torch.randperm(n, generator=generator) if generator else torch.arange(n)

    def get(self, order: torch.Tensor, i: int) -> tuple[Example, torch.Tensor]:
        import torch

        idx = order[i * self.batch : (i + 1) * self.batch]

        def collate(t: Any) -> Any:
            x = t.index_select(0, idx)
            return x.float().div_(255.0) if x.dtype == torch.uint8 else x

        return self.split.inputs.map(collate), self.labels.index_select(0, idx)
