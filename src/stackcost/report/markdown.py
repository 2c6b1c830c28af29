"""Text fit for a markdown table cell."""

from __future__ import annotations


def md_escape(value: object) -> str:
    """A markdown table cell: pipes would split it, newlines end the row, and renderers
    treat '<...>' as HTML (a model named '<b>' must show as text)."""
    text = str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return text.replace("<", "&lt;").replace(">", "&gt;").strip()
