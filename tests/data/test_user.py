"""A user's own data: each reader returns what tiny files hold, and refuses bad input with
one line naming the file, the line and the value, fast (a FIFO never blocks)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stackcost.data import user
from stackcost.data.user import (
    check_lengths,
    read_corpus,
    read_labelled,
    read_labelled_images,
    read_labelled_text,
)
from stackcost.errors import SpecError

ID2LABEL = {0: "cat", 1: "bird"}


def refused(call: Callable[..., Any], *args: Any, **kw: Any) -> str:
    """The one-line message of the SpecError `call` raises."""
    with pytest.raises(SpecError) as info:
        call(*args, **kw)
    message = str(info.value)
    assert "\n" not in message and len(message) <= 300, message
    return message


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


# ---- corpus: what it reads ---------------------------------------------------------------


def test_corpus_txt_file_is_one_document_as_written(tmp_path: Path) -> None:
    f = write(tmp_path / "a.txt", "\ufeffHello\r\nworld é\n")
    corpus = read_corpus(f)
    assert corpus.texts == ("Hello\r\nworld é\n",)  # BOM dropped, newlines kept
    assert corpus.description == f"1 .txt file, {f} (15 characters)"


def test_corpus_folder_reads_txt_recursively_in_path_order(tmp_path: Path) -> None:
    write(tmp_path / "b.txt", "second")
    write(tmp_path / "a" / "z.txt", "first")
    write(tmp_path / "c" / "d.TXT", "third")
    write(tmp_path / "notes.md", "ignored")
    write(tmp_path / ".hidden.txt", "hidden")
    write(tmp_path / ".git" / "x.txt", "hidden too")
    corpus = read_corpus(tmp_path)
    assert corpus.texts == ("first", "second", "third")
    assert corpus.description == (
        f"3 .txt files under {tmp_path} (16 characters; 1 other file ignored)"
    )


def test_corpus_jsonl_reads_the_field_of_every_line(tmp_path: Path) -> None:
    f = write(
        tmp_path / "d.jsonl", '{"text": "one", "id": 1}\n\n{"body": "x", "text": "two\\u2028"}\n'
    )
    assert read_corpus(f).texts == ("one", "two\u2028")
    g = write(tmp_path / "e.jsonl", '{"body": "only"}\n')
    corpus = read_corpus(g, field="body")
    assert corpus.texts == ("only",) and "field 'body'" in corpus.description


# ---- corpus: what it refuses -------------------------------------------------------------


def test_missing_path_is_refused(tmp_path: Path) -> None:
    assert refused(read_corpus, tmp_path / "nope.txt") == f"{tmp_path / 'nope.txt'}: does not exist"
    assert refused(read_corpus, "") == "no data path given"


@pytest.mark.parametrize("content", ["", "  \n\t\n"])
def test_empty_file_holds_no_text(tmp_path: Path, content: str) -> None:
    f = write(tmp_path / "e.txt", content)
    message = refused(read_corpus, f)
    assert message.startswith(f"{f}: holds no text (the file ")


def test_an_empty_document_in_a_folder_is_named(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "fine")
    empty = write(tmp_path / "b.txt", "\n")
    assert refused(read_corpus, tmp_path).startswith(f"{empty}: holds no text")


def test_folder_without_txt_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "text")
    message = refused(read_corpus, tmp_path)
    assert message.startswith(f"{tmp_path}: holds no .txt files (searched recursively); a corpus")


def test_binary_file_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "model.txt", b"PK\x03\x04\x00\x00garbage")
    message = refused(read_corpus, f)
    assert message.startswith(f"{f}: is not UTF-8 text (byte 0x00 at offset 4: a binary file)")


def test_latin1_file_names_the_byte_and_offset(tmp_path: Path) -> None:
    f = write(tmp_path / "l.txt", "café au lait".encode("latin-1"))
    message = refused(read_corpus, f)
    assert message == f"{f}: is not UTF-8 text (byte 0xe9 at offset 3); save it as UTF-8"


def test_wrong_kind_of_file_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "x.csv", "text\nhello\n")
    assert refused(read_corpus, f) == (
        f"{f}: a corpus is a .txt file, a folder of .txt files, or a .jsonl file; got a '.csv' file"
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", r":3: not JSON \(Expecting property name"),
        (
            '["text"]',
            r":3: is a list, not an object; a corpus line is an object with a string 'text'",
        ),
        ('{"body": "x", "id": 2}', r":3: has no 'text' field \(its keys: 'body', 'id'\)"),
        ('{"text": 12}', r":3: field 'text' is a number \(12\), not a string"),
        ('{"text": "  "}', r":3: holds no text \(field 'text' holds only whitespace\)"),
        ("[" * 100_000, r":3: not JSON \(nested too deep\)"),
    ],
)
def test_bad_jsonl_line_is_named(tmp_path: Path, line: str, expected: str) -> None:
    f = write(tmp_path / "c.jsonl", f'{{"text": "a"}}\n\n{line}\n{{"text": "b"}}\n')
    message = refused(read_corpus, f)
    assert re.match(re.escape(str(f)) + expected, message), message


def test_oversized_file_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(user, "MAX_DATA_BYTES", 10)
    f = write(tmp_path / "big.txt", "x" * 11)
    assert refused(read_corpus, f) == f"{f}: is 11 bytes, more than the 10 bytes a data file may be"
    write(tmp_path / "dir" / "a.txt", "x" * 6)
    write(tmp_path / "dir" / "b.txt", "x" * 6)
    message = refused(read_corpus, tmp_path / "dir")
    assert message.startswith(f"{tmp_path / 'dir'}: its 2 .txt files hold 12 bytes, more than")


def _fifo_cases(tmp_path: Path) -> dict[str, Callable[[], Any]]:
    os.mkfifo(tmp_path / "pipe.txt")
    os.mkfifo(tmp_path / "pipe.csv")
    (tmp_path / "txts").mkdir()
    os.mkfifo(tmp_path / "txts" / "a.txt")
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    os.mkfifo(tmp_path / "imgs" / "cat" / "a.png")
    return {
        "corpus file": lambda: read_corpus(tmp_path / "pipe.txt"),
        "corpus folder": lambda: read_corpus(tmp_path / "txts"),
        "labelled csv": lambda: read_labelled(tmp_path / "pipe.csv", ID2LABEL, "text"),
        "image folder": lambda: read_labelled_images(
            tmp_path / "imgs", ID2LABEL, 4, [0.5] * 3, [0.5] * 3
        ),
    }


@pytest.mark.parametrize("case", ["corpus file", "corpus folder", "labelled csv", "image folder"])
def test_fifo_is_refused_without_blocking(tmp_path: Path, case: str) -> None:
    call = _fifo_cases(tmp_path)[case]
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # the assertion below reports it
            outcome.append(exc)

    # A daemon thread: a reader that blocks on open() fails the test instead of hanging it.
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    assert outcome, "the reader blocked on a FIFO"
    assert isinstance(outcome[0], SpecError), outcome[0]
    assert "a FIFO, socket or device, not a regular file" in str(outcome[0])
    assert "pipe" in str(outcome[0]) or "a.txt" in str(outcome[0]) or "a.png" in str(outcome[0])


def test_path_with_newline_stays_one_line(tmp_path: Path) -> None:
    refused(read_corpus, tmp_path / "two\nlines.txt")


# ---- labelled text -----------------------------------------------------------------------


def test_csv_with_names_quotes_and_multiline_fields(tmp_path: Path) -> None:
    f = write(tmp_path / "l.csv", 'text,label\n"a cat, sleeping",cat\n\n"two\nlines",bird\n')
    data = read_labelled_text(f, ID2LABEL)
    assert data.texts == ("a cat, sleeping", "two\nlines") and data.pairs is None
    assert data.labels.dtype == np.int64 and data.labels.tolist() == [0, 1]
    assert data.description == f"2 texts from {f} (2 of the model's 2 labels)"


def test_csv_with_ids_and_a_class_named_like_an_id(tmp_path: Path) -> None:
    f = write(tmp_path / "l.csv", "label,text\n1,x\n0,y\n2,z\n")
    assert read_labelled_text(f, {0: "a", 1: "b", 2: "c"}).labels.tolist() == [1, 0, 2]
    # "2" is the name of class 0 here, so it is read as that name, not as id 2.
    assert read_labelled_text(f, {0: "2", 1: "1", 2: "0"}).labels.tolist() == [1, 2, 0]
    # id2label with string keys, as config.json holds it before transformers reads it
    assert read_labelled_text(f, {"0": "a", "1": "b", "2": "c"}).labels.tolist() == [1, 0, 2]


def test_jsonl_with_pairs_and_integer_labels(tmp_path: Path) -> None:
    f = write(
        tmp_path / "p.jsonl",
        '{"text": "q1", "text_pair": "a1", "label": 1}\n{"text": "q2", "text_pair": "a2", "label": "cat"}\n',
    )
    data = read_labelled_text(f, ID2LABEL)
    assert data.texts == ("q1", "q2") and data.pairs == ("a1", "a2")
    assert data.labels.tolist() == [1, 0]
    assert data.description.startswith("2 pairs from ")


def test_glue_columns_are_text_and_pair(tmp_path: Path) -> None:
    f = write(tmp_path / "g.csv", "idx,sentence1,sentence2,label\n0,s,t,bird\n")
    data = read_labelled_text(f, ID2LABEL)
    assert (data.texts, data.pairs, data.labels.tolist()) == (("s",), ("t",), [1])


def test_explicit_fields(tmp_path: Path) -> None:
    f = write(tmp_path / "x.jsonl", '{"review": "good", "other": "x", "y": "cat"}\n')
    data = read_labelled_text(f, ID2LABEL, text_field="review", pair_field="other", label_field="y")
    assert (data.texts, data.pairs, data.labels.tolist()) == (("good",), ("x",), [0])


@pytest.mark.parametrize(
    ("name", "content", "line"),
    [
        ("l.csv", "text,label\na,cat\nb,bird\nc,dog\n", 4),
        ("l.jsonl", '{"text": "a", "label": "cat"}\n{"text": "b", "label": "dog"}\n', 2),
    ],
)
def test_label_outside_id2label_is_named(
    tmp_path: Path, name: str, content: str, line: int
) -> None:
    f = write(tmp_path / name, content)
    assert refused(read_labelled_text, f, ID2LABEL) == (
        f"{f}:{line}: label 'dog' is not one of the model's labels: cat, bird "
        "(its config's id2label), nor one of their ids 0..1"
    )


@pytest.mark.parametrize("label", ["5", "-1", "True"])
def test_unknown_ids_are_refused(tmp_path: Path, label: str) -> None:
    f = write(tmp_path / "l.csv", f"text,label\na,{label}\n")
    assert f"{f}:2: label '{label}' is not one of" in refused(read_labelled_text, f, ID2LABEL)


def test_jsonl_boolean_label_is_not_an_id(tmp_path: Path) -> None:
    f = write(tmp_path / "l.jsonl", '{"text": "a", "label": true}\n')
    assert refused(read_labelled_text, f, ID2LABEL).startswith(f"{f}:1: label True is not one of")


def test_long_label_list_is_cut(tmp_path: Path) -> None:
    f = write(tmp_path / "l.csv", "text,label\na,zebra\n")
    message = refused(read_labelled_text, f, {i: f"class{i}" for i in range(1000)})
    assert (
        "class0, class1, class2, class3, class4, class5, class6, class7, … (1,000 in all)"
        in message
    )
    assert message.endswith("nor one of their ids 0..999")


def test_csv_without_label_column_names_its_columns(tmp_path: Path) -> None:
    f = write(tmp_path / "l.csv", "text,category\na,cat\n")
    message = refused(read_labelled_text, f, ID2LABEL)
    assert message.startswith(
        f"{f}:1: the header has no 'label' column (it names 'text', 'category'); a text "
        "classifier's CSV starts with a header row naming columns 'text'"
    )


def test_csv_without_header_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "l.csv", "a sleeping cat,cat\na bird,bird\n")
    assert refused(read_labelled_text, f, ID2LABEL).startswith(
        f"{f}:1: the header has no 'text' column (it names 'a sleeping cat', 'cat')"
    )


def test_jsonl_line_without_label(tmp_path: Path) -> None:
    f = write(tmp_path / "l.jsonl", '{"text": "a", "label": 0}\n{"text": "b", "y": 1}\n')
    assert refused(read_labelled_text, f, ID2LABEL) == (
        f"{f}:2: has no 'label' field (its keys: 'text', 'y')"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("text,label\na,cat,extra\n", ":2: 3 fields where the header has 2"),
        ("text,label\na,cat\n ,bird\n", ":3: holds no text (column 'text' holds only whitespace)"),
        ('text,label\n"a"b,cat\n', ":2: not valid CSV ("),
        ("text,label\n", ": holds no examples; a text classifier takes .csv or .jsonl"),
        ("text,text,label\na,b,cat\n", ":1: the header names column 'text' twice"),
    ],
)
def test_bad_csv_rows(tmp_path: Path, content: str, expected: str) -> None:
    f = write(tmp_path / "l.csv", content)
    assert refused(read_labelled_text, f, ID2LABEL).startswith(f"{f}{expected}")


def test_labelled_text_binary_and_latin1(tmp_path: Path) -> None:
    f = write(tmp_path / "b.csv", b"\x00\x01\x02text,label\n")
    assert "is not UTF-8 text (byte 0x00 at offset 0" in refused(read_labelled_text, f, ID2LABEL)
    g = write(tmp_path / "l.csv", "text,label\nnaïve,cat\n".encode("latin-1"))
    assert refused(read_labelled_text, g, ID2LABEL).startswith(
        f"{g}: is not UTF-8 text (byte 0xef at offset 13)"
    )


def test_empty_id2label_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "l.csv", "text,label\na,cat\n")
    assert "has no id2label" in refused(read_labelled_text, f, {})


# ---- labelled images ---------------------------------------------------------------------


def png(path: Path, rgb: tuple[int, int, int], size: tuple[int, int] = (4, 4)) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, rgb).save(path)
    return path


MEAN, STD = [0.5, 0.25, 0.0], [0.5, 0.5, 0.25]


def test_image_folder_is_decoded_resized_and_normalized(tmp_path: Path) -> None:
    png(tmp_path / "bird" / "b.png", (255, 0, 51))
    png(tmp_path / "bird" / "a.png", (0, 255, 102), size=(9, 5))  # resized to 4x4
    png(tmp_path / "0" / "x" / "c.png", (51, 102, 153))  # a subfolder named by its id
    write(tmp_path / "README.md", "not an example")
    data = read_labelled_images(tmp_path, ID2LABEL, 4, MEAN, STD)
    assert data.pixels is not None and data.pixels.shape == (3, 3, 4, 4)
    assert data.pixels.dtype == np.float32 and data.texts is None
    assert data.labels.dtype == np.int64 and data.labels.tolist() == [0, 1, 1]  # "0" < "bird"
    mean, std = np.array(MEAN)[:, None, None], np.array(STD)[:, None, None]
    for i, rgb in enumerate([(51, 102, 153), (0, 255, 102), (255, 0, 51)]):
        want = (np.array(rgb)[:, None, None] / 255 - mean) / std
        np.testing.assert_allclose(data.pixels[i], np.broadcast_to(want, (3, 4, 4)), atol=1e-5)
    assert data.description == f"3 images in 2 class folders under {tmp_path}, at 3x4x4"


def test_grey_images_with_one_channel(tmp_path: Path) -> None:
    png(tmp_path / "cat" / "a.png", (255, 255, 255))
    data = read_labelled_images(tmp_path, ID2LABEL, 2, 0.5, [0.5], channels=1)
    assert data.pixels is not None and data.pixels.shape == (1, 1, 2, 2)
    np.testing.assert_allclose(data.pixels, 1.0)


def test_stray_class_folder_is_named(tmp_path: Path) -> None:
    png(tmp_path / "cat" / "a.png", (0, 0, 0))
    png(tmp_path / "dog" / "a.png", (0, 0, 0))
    assert refused(read_labelled_images, tmp_path, ID2LABEL, 4, MEAN, STD) == (
        f"{tmp_path}: subfolder 'dog' is not one of the model's labels: cat, bird "
        "(its config's id2label), nor one of their ids 0..1"
    )


def test_unreadable_image_is_named(tmp_path: Path) -> None:
    png(tmp_path / "cat" / "a.png", (0, 0, 0))
    bad = write(tmp_path / "cat" / "b.jpg", b"not a jpeg at all")
    assert refused(read_labelled_images, tmp_path, ID2LABEL, 4, MEAN, STD).startswith(
        f"{bad}: not an image Pillow can identify; images are .png, .jpg"
    )
    truncated = png(tmp_path / "bird" / "c.png", (0, 0, 0), size=(64, 64))
    truncated.write_bytes(truncated.read_bytes()[:60])
    bad.unlink()
    assert refused(read_labelled_images, tmp_path, ID2LABEL, 4, MEAN, STD).startswith(
        f"{truncated}: "
    )


def test_no_images_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "cat" / "notes.txt", "x")
    assert refused(read_labelled_images, tmp_path, ID2LABEL, 4, MEAN, STD).startswith(
        f"{tmp_path}: holds no images (.png, .jpg, .jpeg, .bmp, .gif, .webp) in class subfolders"
    )


def test_image_outside_a_class_folder_is_refused(tmp_path: Path) -> None:
    png(tmp_path / "cat" / "a.png", (0, 0, 0))
    loose = png(tmp_path / "b.png", (0, 0, 0))
    assert refused(read_labelled_images, tmp_path, ID2LABEL, 4, MEAN, STD).startswith(
        f"{loose}: is not in a class subfolder"
    )


def test_too_many_pixels_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(user, "MAX_PIXEL_BYTES", 100)
    write(tmp_path / "cat" / "a.png", b"never decoded")
    assert "1 images at 3x4x4 make 192 bytes of float32 pixels" in refused(
        read_labelled_images, tmp_path, ID2LABEL, 4, MEAN, STD
    )


@pytest.mark.parametrize(
    ("mean", "std", "channels", "expected"),
    [
        ([0.5, 0.5], [0.5] * 3, 3, "image mean [0.5, 0.5] has 2 values for 3 channels"),
        ([0.5] * 3, [0.5, 0.0, 0.5], 3, "has a zero"),
        ([0.5] * 3, "abc", 3, "image std 'abc' is not numbers"),
        ([0.5] * 4, [0.5] * 4, 4, "the model takes 4 image channels; 1 or 3 can be read"),
    ],
)
def test_bad_normalization_is_refused(
    tmp_path: Path, mean: Any, std: Any, channels: int, expected: str
) -> None:
    png(tmp_path / "cat" / "a.png", (0, 0, 0))
    message = refused(read_labelled_images, tmp_path, ID2LABEL, 4, mean, std, channels)
    assert expected in message


# ---- dispatch and lengths ----------------------------------------------------------------


def test_read_labelled_refuses_the_other_modality(tmp_path: Path) -> None:
    f = write(tmp_path / "l.csv", "text,label\na,cat\n")
    png(tmp_path / "imgs" / "cat" / "a.png", (0, 0, 0))
    assert refused(read_labelled, tmp_path / "imgs", ID2LABEL, "text") == (
        f"{tmp_path / 'imgs'}: a text classifier takes .csv or .jsonl with text and label; "
        "got a folder"
    )
    assert refused(read_labelled, f, ID2LABEL, "image", size=4, mean=MEAN, std=STD) == (
        f"{f}: an image classifier takes an image folder with one subfolder per class; "
        "got a '.csv' file"
    )
    assert refused(read_labelled, tmp_path / "l.txt", ID2LABEL, "text").endswith("does not exist")
    assert read_labelled(f, ID2LABEL, "text").labels.tolist() == [0]
    images = read_labelled(tmp_path / "imgs", ID2LABEL, "image", size=4, mean=MEAN, std=STD)
    assert images.pixels is not None and images.labels.tolist() == [0]


def test_check_lengths() -> None:
    check_lengths([3, 5, 5], 5, "d.jsonl")
    assert refused(check_lengths, [3, 7, 5, 9], 5, "d.jsonl") == (
        "d.jsonl: example 2 is 7 tokens long, more than the model's 5 (2 of 4 examples are); "
        "shorten or split them"
    )
    assert "is 1,025 characters long" in refused(
        check_lengths, np.array([1025]), 1024, "d.txt", unit="characters"
    )
