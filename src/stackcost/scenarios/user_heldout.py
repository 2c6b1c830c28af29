"""A user's checkpoint on the user's own examples (`stackcost heldout hf:./folder --data PATH`):
the examples turned into what the rungs are fed, the way a deployment of that checkpoint
feeds them.

- **A causal LM** reads text (data/user.py's `read_corpus`). Each document is tokenized by
  the folder's own tokenizer, the documents are joined into one stream (the tokenizer's
  end-of-text id between them, where it has one), and the stream is cut into windows of
  `context + 1` tokens, stride `context`, as llama.cpp's `llama-perplexity` reads a file:
  the second half of each window is scored, the first is its context
  (scenarios/decoder_heldout.py).
- **A sequence classifier** reads labelled text (a text, or a pair) and is fed input_ids
  and attention_mask, padded on the right to the longest example with the tokenizer's pad
  id, the mask 0 over the padding: one static shape, as an exported graph is built for,
  and no example truncated (a longer one than the model's positions is refused at entry).
  A pair keeps the token type ids its tokenizer gives, where the model takes them.
- **An image classifier** reads an image folder, resized and normalized by the folder's
  preprocessor_config.json (its image_mean and image_std; transformers' defaults without
  one), and is fed pixel_values.

A static precision (int8) calibrates on `--calibration PATH`, or on a share of the data
drawn with a fixed seed and then never scored; the record says which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stackcost.errors import SpecError

if TYPE_CHECKING:
    import torch

    from stackcost.data.splits import Split
    from stackcost.data.user import Corpus, Labelled
    from stackcost.quantize import Calibration
    from stackcost.workload import Example

# The share of the examples a static precision calibrates on when no --calibration is given.
CALIBRATION_SHARE = 0.2
SPLIT_SEED = 0  # the draw of that share, fixed so a rerun scores the same examples
# transformers' image processors' defaults (ViTImageProcessor) where a folder has no
# preprocessor_config.json.
DEFAULT_MEAN, DEFAULT_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
MAX_PREPROCESSOR_BYTES = 1 << 20
# The files a tokenizer is saved as (fast, slow BPE/WordPiece, SentencePiece).
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model")


def tokenizer_of(folder: str) -> Any:
    """The folder's own tokenizer (transformers' AutoTokenizer, offline); SpecError when it
    has none or it does not load."""
    from transformers import AutoTokenizer

    advice = (
        "text is tokenized by the checkpoint's own tokenizer: save it beside the model "
        "(tokenizer.save_pretrained)"
    )
    if not any((Path(folder) / name).is_file() for name in TOKENIZER_FILES):
        # transformers would build an empty tokenizer from the config alone, which turns
        # any text into no tokens at all.
        raise SpecError(
            f"checkpoint {folder}: its tokenizer does not load (no {', '.join(TOKENIZER_FILES)} "
            f"in the folder); {advice}"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to load is the folder's, one line
        text = " ".join(str(exc).split())[:200]
        raise SpecError(
            f"checkpoint {folder}: its tokenizer does not load ({type(exc).__name__}: {text}); "
            f"{advice}"
        ) from None
    if len(tokenizer) == 0:
        raise SpecError(
            f"checkpoint {folder}: its tokenizer does not load (no vocabulary); {advice}"
        )
    return tokenizer


# -- a causal LM's text ------------------------------------------------------------------


@dataclass(frozen=True)
class Windows:
    """Token windows a decoder is scored on: ids (n, context), the next token at each
    position (n, context), the context each window's scoring starts after, and how the
    text became them."""

    ids: np.ndarray
    labels: np.ndarray
    half: int
    record: dict[str, Any]


def text_windows(corpus: Corpus, tokenizer: Any, context: int, limit: int | None) -> Windows:
    """`corpus` as llama-perplexity reads a file: one token stream, windows of context + 1
    tokens, stride context; at most `limit` windows. SpecError when the text makes none."""
    separator = tokenizer.eos_token_id
    stream: list[int] = []
    for i, text in enumerate(corpus.texts):
        if i and separator is not None:
            stream.append(int(separator))
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
    count = (len(stream) - 1) // context
    if count < 1:
        raise SpecError(
            f"--data: {corpus.description} is {len(stream)} tokens, fewer than one window of "
            f"{context + 1} (--prompt-len {context} + 1); give more text or a shorter --prompt-len"
        )
    count = min(count, limit) if limit else count
    blocks = np.array(
        [stream[i * context : i * context + context + 1] for i in range(count)], dtype=np.int64
    )
    record = {
        "data": corpus.description,
        "tokens": len(stream),
        "windows": count,
        "context": context,
        "how": (
            "documents tokenized by the checkpoint's tokenizer, joined "
            + (
                f"by its end-of-text id ({separator})"
                if separator is not None
                else "(it has no end-of-text id)"
            )
            + f", cut into windows of {context + 1} tokens (stride {context}); the second "
            "half of each scored"
        ),  # fmt: skip
    }
    return Windows(blocks[:, :-1], blocks[:, 1:], context // 2, record)


# -- a classifier's examples ---------------------------------------------------------------


@dataclass(frozen=True)
class Examples:
    """A classifier's examples as it is fed them: every input over all examples (dim 0),
    the labels, and how they were made."""

    inputs: Example
    labels: torch.Tensor
    how: str

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: np.ndarray) -> Examples:
        import torch

        rows = torch.from_numpy(index)
        return Examples(self.inputs.map(lambda t: t[rows]), self.labels[rows], self.how)


def text_examples(
    labelled: Labelled, tokenizer: Any, maximum: int, takes_token_types: bool, source: str
) -> Examples:
    """Labelled text tokenized for the classifier, padded to the longest example; SpecError
    naming the first example longer than the model's `maximum` positions."""
    import torch

    from stackcost.data.user import check_lengths
    from stackcost.workload import Example

    if tokenizer.pad_token_id is None:
        # GPT-2-style tokenizers have no pad token; the model pools at its pad id, which
        # the checkpoint's config names (zoo/hf.py sets it to the end-of-text id).
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.convert_ids_to_tokens(0)
    texts = list(labelled.texts or ())
    pairs = list(labelled.pairs) if labelled.pairs is not None else None
    lengths = [
        len(ids) for ids in tokenizer(texts, pairs, truncation=False)["input_ids"]
    ]  # fmt: skip
    check_lengths(lengths, maximum, source)
    encoded = tokenizer(
        texts, pairs, padding="longest", truncation=False, return_tensors="pt"
    )  # fmt: skip
    names = ["input_ids", "attention_mask"]
    if pairs is not None and takes_token_types and "token_type_ids" in encoded:
        names.append("token_type_ids")
    inputs = Example(tuple(names), tuple(encoded[n].to(torch.int64) for n in names), True)
    width = int(encoded["input_ids"].shape[1])
    how = (
        f"{len(texts)} {'pairs' if pairs is not None else 'texts'} tokenized by the "
        f"checkpoint's tokenizer, padded on the right to the longest ({width} tokens) with "
        f"pad id {tokenizer.pad_token_id}, attention mask 0 over the padding; none truncated"
    )
    return Examples(inputs, torch.from_numpy(labelled.labels), how)


def image_settings(folder: str, cfg: Any) -> tuple[int, list[float], list[float], str]:
    """(size, mean, std, where they came from) for an image classifier: its config's
    image_size, and its preprocessor_config.json's normalization where it has one."""
    size = int(getattr(cfg, "image_size", 224))
    path = Path(folder) / "preprocessor_config.json"
    if not path.is_file():
        return (
            size,
            list(DEFAULT_MEAN),
            list(DEFAULT_STD),
            "transformers' defaults (no preprocessor_config.json)",
        )
    if path.stat().st_size > MAX_PREPROCESSOR_BYTES:
        raise SpecError(f"checkpoint {folder}: preprocessor_config.json is larger than 1 MiB")
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecError(
            f"checkpoint {folder}: preprocessor_config.json is not JSON ({exc})"
        ) from None
    mean = settings.get("image_mean", DEFAULT_MEAN) if settings.get("do_normalize", True) else 0.0
    std = settings.get("image_std", DEFAULT_STD) if settings.get("do_normalize", True) else 1.0
    return size, mean, std, "the checkpoint's preprocessor_config.json"


def image_examples(labelled: Labelled, how: str) -> Examples:
    import torch

    from stackcost.workload import Example

    assert labelled.pixels is not None
    pixels = torch.from_numpy(labelled.pixels)
    inputs = Example(("pixel_values",), (pixels,), True)
    return Examples(inputs, torch.from_numpy(labelled.labels), how)


# -- calibration ---------------------------------------------------------------------------


def calibration_split(count: int, share: float) -> tuple[np.ndarray, np.ndarray]:
    """(calibration rows, scored rows): `share` of `count` rows drawn with SPLIT_SEED, at
    least one, the rest scored (at least one)."""
    order = np.random.default_rng(SPLIT_SEED).permutation(count)
    take = min(max(1, round(count * share)), count - 1)
    return np.sort(order[:take]), np.sort(order[take:])


def calibration_batches(examples: Examples, batch: int, source: str) -> Calibration:
    """`examples` in batches of exactly `batch` (the last filled by repeating its rows), for
    a static precision's scales."""
    import torch

    from stackcost.quantize import Calibration

    batches = []
    for start in range(0, len(examples), batch):
        rows = np.arange(start, min(start + batch, len(examples)))
        if len(rows) < batch:
            rows = np.resize(rows, batch)
        index = torch.from_numpy(rows)
        batches.append(examples.inputs.map(lambda t, index=index: t[index]))
    return Calibration(batches, source)


def as_split(examples: Examples, source: str) -> Split:
    """The scored examples as scenarios/heldout.py's evaluation reads a test split."""
    from stackcost.data.splits import Split

    return Split(examples.inputs, examples.labels, source, examples.how)
