"""Error messages stay one short line, however long or multi-line the bad value is.

A message names the bad value; a 4 MB value, or one with newlines, must not become a
4 MB or many-line message.
"""

from __future__ import annotations

import re

MAX_MESSAGE = 300  # characters in one `stackcost: error: ...` line
MAX_VALUE = 80  # characters of one value quoted inside a message
MAX_PATH = 120  # characters of a file's path that a message starts with


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` with whitespace runs (newlines included) as one space, clipped to `limit`."""
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def middle(text: str, limit: int = MAX_PATH) -> str:
    """`text` clipped in the middle, so both ends (a path's root and file) stay visible."""
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return f"{text[:half]}…{text[-half:]}"


def shown(value: object, limit: int = MAX_VALUE) -> str:
    """repr(value) for a message, clipped in the middle."""
    return middle(repr(value), limit)
