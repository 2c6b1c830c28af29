"""Readers of a user's own examples, for scoring a user's own checkpoint on them.

`stackcost heldout hf:./folder --data PATH` scores a Hugging Face checkpoint on data we have
never seen, so everything here is hostile until checked: each refusal is one `SpecError`
line naming the file (and line), the value and what is allowed, never a traceback. A file
is stat'ed before it is opened (a FIFO named `x.txt` must not block, a 50 GB file must not
be slurped), and the text must be UTF-8 (a BOM is fine).

- `read_corpus`: text a causal LM is scored on. A `.txt` file (one document), a folder of
  `.txt` files (each one document, found recursively, in sorted order of their path under
  the folder), or a `.jsonl` file (each line an object with a string field, default "text").
- `read_labelled_text`: a text classifier's examples, a `.csv` (header row required) or a
  `.jsonl`, with a text, an optional second text of a pair, and a label.
- `read_labelled_images`: an image classifier's examples, a folder with one subfolder per
  class, decoded as transformers' ViT image processor does by default (bilinear resize to
  size x size, scaled to [0, 1], normalized by the model's mean and std).
- `read_labelled`: the one of those two a classifier's modality takes.
- `check_lengths`: the caller's check that no tokenized example exceeds the model's context.

A label is a class name (a value of the model's config's id2label, exact match) or an
integer id (a key of it). Hidden files and folders (a leading ".") are skipped everywhere.
Lines are 1-based lines of the file as an editor shows them.

numpy and the standard library at import; Pillow is imported when images are decoded.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from stackcost.clip import middle, one_line, shown
from stackcost.errors import SpecError

__all__ = [
    "IMAGE_SUFFIXES",
    "MAX_DATA_BYTES",
    "MAX_IMAGE_BYTES",
    "MAX_PIXEL_BYTES",
    "Corpus",
    "Labelled",
    "check_lengths",
    "read_corpus",
    "read_labelled",
    "read_labelled_images",
    "read_labelled_text",
]

MAX_DATA_BYTES = 1 << 30  # one text file, or a folder's .txt files together
MAX_IMAGE_BYTES = 256 << 20  # one image file; Pillow's own bomb check bounds its pixels
# The decoded images are held at once as float32; past this, refuse before decoding
# rather than swap or be killed (at 3x224x224 it is about 7,000 images).
MAX_PIXEL_BYTES = 4 << 30
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
NUL_SCAN = 8192  # a NUL byte this early means a binary file, whatever decodes after it

CORPUS_TAKES = "a corpus is a .txt file, a folder of .txt files, or a .jsonl file"
TEXT_TAKES = "a text classifier takes .csv or .jsonl with text and label"
IMAGE_TAKES = "an image classifier takes an image folder with one subfolder per class"
# GLUE-style columns, used when the asked text field is the default "text" and is absent.
TEXT_ALIASES = (("sentence1", "sentence2"), ("sentence", None))
DEFAULT_PAIR = "text_pair"
LINE = "each line of a text classifier's JSONL"  # what `_field` says a line must be


@dataclass(frozen=True)
class Corpus:
    """Text a causal LM is scored on: one str per document (a .txt file, a JSONL line),
    exactly as written (newlines kept, a BOM dropped)."""

    texts: tuple[str, ...]
    description: str  # e.g. "3 .txt files under /abs/dir (12,345 characters)"


@dataclass(frozen=True, eq=False)  # eq=False: numpy arrays have no single truth value
class Labelled:
    """Examples a classifier is scored on, in reading order.

    labels: (N,) int64 class ids, keys of the model's id2label. Text classification sets
    texts (and pairs, the second text of a pair, when the data has one); image
    classification sets pixels, (N, C, H, W) float32, already normalized.
    """

    labels: np.ndarray
    texts: tuple[str, ...] | None = None
    pairs: tuple[str, ...] | None = None
    pixels: np.ndarray | None = None
    description: str = ""

    def __len__(self) -> int:
        return len(self.labels)


# ---- corpus ------------------------------------------------------------------------------


def read_corpus(path: str | Path, field: str = "text") -> Corpus:
    """The documents at `path`: a .txt file, a folder of .txt files (recursive, sorted by
    path under the folder; other files ignored), or a .jsonl file whose every non-blank
    line is an object with a string `field`. SpecError on anything else."""
    with _one_line():
        path = _given(path)
        mode = _stat(path).st_mode
        if stat.S_ISDIR(mode):
            return _corpus_folder(path)
        suffix = path.suffix.lower()
        if suffix == ".txt":
            text = _read_text(path, CORPUS_TAKES)
            _need_text(text, _name(path), "the file")
            return Corpus((text,), f"1 .txt file, {_abs(path)} ({len(text):,} characters)")
        if suffix == ".jsonl":
            texts = tuple(_corpus_jsonl(path, field))
            chars = sum(map(len, texts))
            return Corpus(
                texts,
                f"{len(texts):,} documents from {_abs(path)}, field {field!r} "
                f"({chars:,} characters)",
            )
        raise SpecError(f"{_name(path)}: {CORPUS_TAKES}; got {_kind(path, mode)}")


def _corpus_folder(root: Path) -> Corpus:
    files, others = [], 0
    for file in _walk(root):
        if file.suffix.lower() == ".txt":
            files.append(file)
        else:
            others += 1
    if not files:
        raise SpecError(
            f"{_name(root)}: holds no .txt files (searched recursively); {CORPUS_TAKES}"
        )
    # Bounded on the sizes before any is read: 100,000 files of 1 MB fail fast, not at the end.
    total = sum(_regular(file, MAX_DATA_BYTES, CORPUS_TAKES).st_size for file in files)
    if total > MAX_DATA_BYTES:
        raise SpecError(
            f"{_name(root)}: its {len(files):,} .txt files hold {_bytes(total)}, more than "
            f"the {_bytes(MAX_DATA_BYTES)} read at once; score a part of them"
        )
    texts = []
    for file in files:
        text = _read_text(file, CORPUS_TAKES)
        _need_text(text, _name(file), "the file")
        texts.append(text)
    chars = sum(map(len, texts))
    ignored = f"; {others:,} other file{'s' if others > 1 else ''} ignored" if others else ""
    noun = "file" if len(files) == 1 else "files"
    return Corpus(
        tuple(texts),
        f"{len(files):,} .txt {noun} under {_abs(root)} ({chars:,} characters{ignored})",
    )


def _corpus_jsonl(path: Path, field: str) -> Iterator[str]:
    source = _name(path)
    # _jsonl refuses a file of blank lines, so at least one document comes out.
    for line, record in _jsonl(path, CORPUS_TAKES):
        where = f"{source}:{line}"
        text = _field(record, field, where, "a corpus line")
        _need_text(text, where, f"field {field!r}")
        yield text


# ---- labelled text -----------------------------------------------------------------------


def read_labelled_text(
    path: str | Path,
    id2label: Mapping[int, str],
    text_field: str = "text",
    pair_field: str | None = None,
    label_field: str = "label",
) -> Labelled:
    """A text classifier's examples from a .csv (comma-separated, header row required) or a
    .jsonl (one object a line).

    Columns (CSV) or fields (JSONL): `text_field`, `label_field`, and `pair_field` when
    given. When `text_field` is the default "text" and absent, GLUE's "sentence1" (with
    "sentence2" as the pair) or "sentence" is read instead; when `pair_field` is None, a
    "text_pair" column (or "sentence2", as said) is the pair if there is one. In JSONL the
    first line decides the fields every line must have.
    """
    with _one_line():
        path = _given(path)
        mode = _stat(path).st_mode
        suffix = path.suffix.lower()
        if stat.S_ISDIR(mode) or suffix not in (".csv", ".jsonl"):
            raise SpecError(f"{_name(path)}: {TEXT_TAKES}; got {_kind(path, mode)}")
        labels = _Labels(id2label)
        fields = (text_field, pair_field, label_field)
        rows = _csv_rows(path, fields) if suffix == ".csv" else _jsonl_rows(path, fields)
        texts, pairs, ids = [], [], []
        for where, text, pair, label in rows:
            texts.append(text)
            if pair is not None:
                pairs.append(pair)
            ids.append(labels.to_id(label, where))
        if not ids:
            raise SpecError(f"{_name(path)}: holds no examples; {TEXT_TAKES}")
        used = len(set(ids))
        return Labelled(
            labels=np.array(ids, dtype=np.int64),
            texts=tuple(texts),
            pairs=tuple(pairs) if pairs else None,
            description=(
                f"{len(ids):,} {'pairs' if pairs else 'texts'} from {_abs(path)} "
                f"({used} of the model's {len(labels.names)} labels)"
            ),
        )


Row = tuple[str, str, str | None, Any]  # where (file:line), text, pair, raw label


def _pick(
    keys: Sequence[str], fields: tuple[str, str | None, str], where: str, csv_: bool
) -> tuple[str, str | None, str]:
    """The (text, pair, label) names to read, given the CSV's columns or the first line's keys."""
    text, pair, label = fields
    if text == "text" and text not in keys:
        for alias, alias_pair in TEXT_ALIASES:
            if alias in keys:
                text = alias
                if pair is None and alias_pair in keys:
                    pair = alias_pair
                break
    if pair is None and DEFAULT_PAIR in keys:
        pair = DEFAULT_PAIR
    for name in (text, label, pair):
        if name is None or name in keys:
            continue
        wanted = f"{fields[0]!r}" + (" (or 'sentence1'/'sentence')" if fields[0] == "text" else "")
        wanted += f" and {fields[2]!r}" + (f" (and {fields[1]!r})" if fields[1] else "")
        if csv_:
            raise SpecError(
                f"{where}: the header has no {name!r} column (it names {_listed(keys)}); a "
                f"text classifier's CSV starts with a header row naming columns {wanted}"
            )
        raise SpecError(
            f"{where}: has no {name!r} field (its keys: {_listed(keys)}); each line of a "
            f"text classifier's JSONL is an object with {wanted}"
        )
    return text, pair, label


def _csv_rows(path: Path, fields: tuple[str, str | None, str]) -> Iterator[Row]:
    source = _name(path)
    text = _read_text(path, TEXT_TAKES)
    _need_text(text, source, "the file")
    # strict: a stray quote is an error, not a silently merged field.
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    columns: tuple[int, int | None, int] = (0, None, 0)
    names: tuple[str, str | None, str] = ("", None, "")
    while True:
        start = reader.line_num + 1  # a quoted field may span lines: name the first
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise SpecError(
                f"{source}:{start}: not valid CSV ({one_line(str(exc), 100)}); {TEXT_TAKES}"
            ) from None
        if not row:
            continue  # a blank line
        where = f"{source}:{start}"
        if header is None:
            header = row
            names = _pick(header, fields, where, csv_=True)
            for name in names:
                if name is not None and header.count(name) > 1:
                    raise SpecError(f"{where}: the header names column {name!r} twice")
            columns = (
                header.index(names[0]),
                None if names[1] is None else header.index(names[1]),
                header.index(names[2]),
            )
            continue
        if len(row) != len(header):
            raise SpecError(
                f"{where}: {len(row)} fields where the header has {len(header)} (a text "
                'holding a comma must be in double quotes: "a, b")'
            )
        t, p, lab = columns
        _need_text(row[t], where, f"column {names[0]!r}")
        if p is not None:
            _need_text(row[p], where, f"column {names[1]!r}")
        yield where, row[t], None if p is None else row[p], row[lab]


def _jsonl_rows(path: Path, fields: tuple[str, str | None, str]) -> Iterator[Row]:
    source = _name(path)
    names: tuple[str, str | None, str] | None = None
    for line, record in _jsonl(path, TEXT_TAKES):
        where = f"{source}:{line}"
        if names is None:
            if not isinstance(record, dict):
                _field(record, fields[0], where, LINE)  # raises: not an object
            names = _pick(list(record), fields, where, csv_=False)
        text = _field(record, names[0], where, LINE)
        _need_text(text, where, f"field {names[0]!r}")
        pair = None
        if names[1] is not None:
            pair = _field(record, names[1], where, LINE)
            _need_text(pair, where, f"field {names[1]!r}")
        if names[2] not in record:
            _field(record, names[2], where, LINE)  # raises, naming the keys there
        yield where, text, pair, record[names[2]]


class _Labels:
    """A model's id2label, and a label as the data gives it -> its id."""

    def __init__(self, id2label: Mapping[Any, Any]) -> None:
        if not id2label:
            raise SpecError("the model's config has no id2label: its classes are unknown")
        self.names: dict[int, str] = {}
        for key, name in id2label.items():
            # A config.json read as plain JSON has string keys ("0"); transformers' has ints.
            if isinstance(key, bool) or not re.fullmatch(r"-?\d{1,18}", str(key)):
                raise SpecError(f"the model's id2label has key {shown(key)}, not an integer id")
            self.names[int(key)] = str(name)
        self.ids: dict[str, list[int]] = {}
        for key in sorted(self.names):
            self.ids.setdefault(self.names[key], []).append(key)

    def to_id(self, label: Any, where: str) -> int:
        if isinstance(label, str) and label in self.ids:
            ids = self.ids[label]
            if len(ids) > 1:
                raise SpecError(
                    f"{where}: label {shown(label)} names ids {_listed(ids)} in the model's "
                    "id2label; give the id instead"
                )
            return ids[0]
        # An id given as text ("2") counts only when no class is named "2" (checked above).
        given = label
        if isinstance(label, str) and re.fullmatch(r"-?[0-9]{1,18}", label.strip()):
            label = int(label.strip())
        if isinstance(label, int) and not isinstance(label, bool) and label in self.names:
            return label
        raise SpecError(f"{where}: label {shown(given)} {self.allowed()}")

    def allowed(self) -> str:
        ids = sorted(self.names)
        names = _listed([self.names[i] for i in ids], quote=False)
        if ids == list(range(ids[0], ids[0] + len(ids))):
            span = f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])
        else:
            span = _listed(ids, quote=False)
        return (
            f"is not one of the model's labels: {names} (its config's id2label), "
            f"nor one of their ids {span}"
        )


# ---- labelled images ---------------------------------------------------------------------


def read_labelled_images(
    path: str | Path,
    id2label: Mapping[int, str],
    size: int,
    mean: float | Sequence[float],
    std: float | Sequence[float],
    channels: int = 3,
) -> Labelled:
    """An image classifier's examples from a folder with one subfolder per class.

    A subfolder's name is a class name of id2label (or its integer id); its images (any of
    IMAGE_SUFFIXES, found recursively, other files ignored) are that class. Each image is
    converted to RGB (L when channels == 1), resized to size x size with bilinear
    resampling unless already that size, scaled to [0, 1] and normalized by mean and std
    (one value, or one per channel), as transformers' ViT image processor does by default.
    Order: by subfolder name, then by path within it.
    """
    with _one_line():
        path = _given(path)
        mode = _stat(path).st_mode
        if not stat.S_ISDIR(mode):
            raise SpecError(f"{_name(path)}: {IMAGE_TAKES}; got {_kind(path, mode)}")
        if channels not in (1, 3):
            raise SpecError(f"the model takes {channels} image channels; 1 or 3 can be read")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise SpecError(f"image size {shown(size)} is not a positive integer")
        mean_ = _per_channel(mean, channels, "mean")
        std_ = _per_channel(std, channels, "std")
        if np.any(std_ == 0):
            raise SpecError(f"the model's image std {shown(list(map(float, std_)))} has a zero")
        labels = _Labels(id2label)
        files, ids = _image_files(path, labels)
        need = len(files) * channels * size * size * 4
        if need > MAX_PIXEL_BYTES:
            raise SpecError(
                f"{_name(path)}: {len(files):,} images at {channels}x{size}x{size} make "
                f"{_bytes(need)} of float32 pixels, more than the {_bytes(MAX_PIXEL_BYTES)} "
                "read at once; score a part of them"
            )
        pixels = np.empty((len(files), channels, size, size), dtype=np.float32)
        for i, file in enumerate(files):
            pixels[i] = _decode(file, size, channels)
        pixels -= mean_[None, :, None, None]
        pixels /= std_[None, :, None, None]
        return Labelled(
            labels=np.array(ids, dtype=np.int64),
            pixels=pixels,
            description=(
                f"{len(files):,} images in {len(set(ids))} class folders under {_abs(path)}, "
                f"at {channels}x{size}x{size}"
            ),
        )


def _image_files(root: Path, labels: _Labels) -> tuple[list[Path], list[int]]:
    files: list[Path] = []
    ids: list[int] = []
    entries = sorted(_scandir(root), key=lambda e: e.name)
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if not entry.is_dir():
            if entry.name.lower().endswith(IMAGE_SUFFIXES):
                raise SpecError(
                    f"{_name(Path(entry.path))}: is not in a class subfolder; {IMAGE_TAKES} "
                    "(named as in its config's id2label)"
                )
            continue  # a README, a labels file: not an example
        class_id = _folder_class(entry.name, root, labels)
        for file in _walk(Path(entry.path)):
            if file.suffix.lower() in IMAGE_SUFFIXES:
                files.append(file)
                ids.append(class_id)
    if not files:
        raise SpecError(
            f"{_name(root)}: holds no images ({', '.join(IMAGE_SUFFIXES)}) in class "
            f"subfolders; {IMAGE_TAKES}"
        )
    return files, ids


def _folder_class(name: str, root: Path, labels: _Labels) -> int:
    try:
        return labels.to_id(name, "")
    except SpecError:
        raise SpecError(f"{_name(root)}: subfolder {shown(name)} {labels.allowed()}") from None


def _decode(file: Path, size: int, channels: int) -> np.ndarray:
    """One image as (C, size, size) float32 in [0, 1]."""
    from PIL import Image

    _regular(file, MAX_IMAGE_BYTES, IMAGE_TAKES)
    try:
        with Image.open(file) as img:
            img = img.convert("L" if channels == 1 else "RGB")
            if img.size != (size, size):
                img = img.resize((size, size), Image.Resampling.BILINEAR)
            array = np.asarray(img, dtype=np.float32)
    # Pillow's decoders raise many kinds (OSError, SyntaxError, ValueError, EOFError,
    # struct.error, DecompressionBombError): whichever, the file is not an image we can use.
    except Exception as exc:
        problem = (
            "not an image Pillow can identify"
            if type(exc).__name__ == "UnidentifiedImageError"
            else f"cannot be decoded ({type(exc).__name__}: {one_line(str(exc), 100)})"
        )
        raise SpecError(
            f"{_name(file)}: {problem}; images are {', '.join(IMAGE_SUFFIXES)}"
        ) from None
    array = array[None] if channels == 1 else array.transpose(2, 0, 1)
    return array / np.float32(255.0)


def _per_channel(value: float | Sequence[float], channels: int, what: str) -> np.ndarray:
    try:
        array = np.atleast_1d(np.asarray(value, dtype=np.float32))
    except (TypeError, ValueError):
        raise SpecError(f"the model's image {what} {shown(value)} is not numbers") from None
    if not np.all(np.isfinite(array)):
        raise SpecError(f"the model's image {what} {shown(value)} is not finite")
    if array.ndim != 1 or len(array) not in (1, channels):
        raise SpecError(
            f"the model's image {what} {shown(value)} has {array.size} values for "
            f"{channels} channels"
        )
    return np.broadcast_to(array, (channels,)).copy()


# ---- dispatch and lengths ----------------------------------------------------------------


def read_labelled(
    path: str | Path,
    id2label: Mapping[int, str],
    modality: Literal["text", "image"],
    **kw: Any,
) -> Labelled:
    """`read_labelled_images` for modality "image" (a folder), `read_labelled_text` for
    "text" (a .csv or .jsonl); `kw` goes to that reader. SpecError when the path is the
    other kind."""
    if modality not in ("text", "image"):
        raise ValueError(f"modality must be 'text' or 'image', not {modality!r}")
    with _one_line():
        given = _given(path)
        mode = _stat(given).st_mode
        if modality == "image":
            if not stat.S_ISDIR(mode):
                raise SpecError(f"{_name(given)}: {IMAGE_TAKES}; got {_kind(given, mode)}")
            return read_labelled_images(given, id2label, **kw)
        if stat.S_ISDIR(mode):
            raise SpecError(f"{_name(given)}: {TEXT_TAKES}; got a folder")
        return read_labelled_text(given, id2label, **kw)


def check_lengths(
    lengths: Sequence[int], maximum: int, path: str | Path, unit: str = "tokens"
) -> None:
    """SpecError naming the first example (1-based, in reading order) longer than `maximum`
    `unit`, its length, and how many are."""
    over = [i for i, n in enumerate(lengths) if n > maximum]
    if over:
        first = over[0]
        raise SpecError(
            one_line(
                f"{_name(Path(path))}: example {first + 1} is {lengths[first]:,} {unit} long, "
                f"more than the model's {maximum:,} ({len(over):,} of {len(lengths):,} "
                "examples are); shorten or split them"
            )
        )


# ---- files -------------------------------------------------------------------------------


@contextmanager
def _one_line() -> Iterator[None]:
    """Whatever a message quotes (a path with newlines, a long label list), one line."""
    try:
        yield
    except SpecError as exc:
        raise SpecError(one_line(str(exc))) from None


def _given(path: str | Path) -> Path:
    if str(path) == "":  # Path("") is the current directory: never what was meant
        raise SpecError("no data path given")
    return Path(path)


def _name(path: Path) -> str:
    return middle(str(path))


def _abs(path: Path) -> str:
    return middle(os.path.abspath(path))


def _bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise SpecError(f"{_name(path)}: does not exist") from None
    except OSError as exc:
        raise SpecError(f"{_name(path)}: cannot be read ({exc.strerror or exc})") from None
    except ValueError:  # an embedded NUL in the path
        raise SpecError(f"{shown(str(path))}: is not a valid path") from None


def _kind(path: Path, mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if not stat.S_ISREG(mode):
        return "a FIFO, socket or device, not a regular file"
    return f"a {shown(path.suffix)} file" if path.suffix else "a file with no extension"


def _regular(path: Path, limit: int, takes: str) -> os.stat_result:
    """The stat of a regular file no larger than `limit`; checked before opening, so a FIFO
    never blocks and a huge file is never read."""
    st = _stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(f"{_name(path)}: is {_kind(path, st.st_mode)}; {takes}")
    if st.st_size > limit:
        raise SpecError(
            f"{_name(path)}: is {_bytes(st.st_size)}, more than the {_bytes(limit)} "
            "a data file may be"
        )
    return st


def _read_text(path: Path, takes: str) -> str:
    """A regular file's text, UTF-8 (a leading BOM dropped)."""
    _regular(path, MAX_DATA_BYTES, takes)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DATA_BYTES + 1)  # a file that grew, or lies about its size
    except OSError as exc:
        raise SpecError(f"{_name(path)}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_DATA_BYTES:
        raise SpecError(
            f"{_name(path)}: is more than the {_bytes(MAX_DATA_BYTES)} a data file may be"
        )
    nul = data.find(b"\0", 0, NUL_SCAN)
    if nul >= 0:
        raise SpecError(
            f"{_name(path)}: is not UTF-8 text (byte 0x00 at offset {nul}: a binary file); {takes}"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{_name(path)}: is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); save it as UTF-8"
        ) from None
    return text.removeprefix("\ufeff")


def _need_text(text: str, where: str, what: str) -> None:
    if not text.strip():
        empty = "is empty" if not text else "holds only whitespace"
        raise SpecError(f"{where}: holds no text ({what} {empty})")


def _scandir(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError as exc:
        raise SpecError(f"{_name(folder)}: cannot be listed ({exc.strerror or exc})") from None


def _walk(root: Path) -> list[Path]:
    """Every non-hidden file under root, sorted by its path's parts under root. Symlinked
    folders inside are not followed (no loops); symlinked files are read."""
    found: list[tuple[tuple[str, ...], Path]] = []

    def fail(exc: OSError) -> None:
        raise SpecError(f"{_name(Path(exc.filename or root))}: cannot be listed ({exc.strerror})")

    for folder, dirs, names in os.walk(root, onerror=fail):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        base = Path(folder)
        parts = base.relative_to(root).parts
        for name in names:
            if not name.startswith("."):
                found.append(((*parts, name), base / name))
    found.sort(key=lambda item: item[0])
    return [file for _, file in found]


def _jsonl(path: Path, takes: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each non-blank line."""
    text = _read_text(path, takes)
    _need_text(text, _name(path), "the file")
    # split("\n"), not splitlines(): U+2028 and friends may sit raw inside a JSON string.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError; nesting too deep
            problem = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
            raise SpecError(
                f"{_name(path)}:{number}: not JSON ({problem}); each line of a .jsonl file "
                "is one JSON object"
            ) from None


def _field(record: Any, field: str, where: str, what: str) -> str:
    """record[field], which must be a string."""
    if not isinstance(record, dict):
        raise SpecError(
            f"{where}: is {_json_type(record)}, not an object; {what} is an object with a "
            f"string {field!r}"
        )
    if field not in record:
        raise SpecError(f"{where}: has no {field!r} field (its keys: {_listed(list(record))})")
    value = record[field]
    if not isinstance(value, str):
        raise SpecError(f"{where}: field {field!r} is {_json_type(value)}, not a string")
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({shown(value, 20)})"
    return "null" if value is None else "a string"


def _listed(values: Sequence[Any], quote: bool = True, most: int = 8) -> str:
    """Values for a message: the first `most`, each clipped, then how many more."""
    if not values:
        return "none"
    shown_ = [shown(v, 30) if quote else middle(str(v), 30) for v in values[:most]]
    more = f", … ({len(values):,} in all)" if len(values) > most else ""
    return ", ".join(shown_) + more
