"""The page's figure slots: each section registers its figures in page order (their ids
follow it), as JSON that is safe inside a <script> element."""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go


def script_json(payload: str) -> str:
    """JSON that cannot end its <script> element early or be read as HTML.

    '<', '>' and '&' occur in JSON only inside strings, where \\u-escapes mean the same.
    """
    return (
        payload.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


@dataclass
class Figures:
    """Collects figures in page order; their count is exposed as data-figure-count."""

    items: list[dict[str, str]] = field(default_factory=list)

    def add(self, fig: go.Figure | None, note: str = "") -> dict[str, str]:
        if fig is None:
            return {"id": "", "note": note}
        fig_id = f"sc-fig-{len(self.items)}"
        self.items.append({"id": fig_id, "json": script_json(fig.to_json())})
        return {"id": fig_id, "note": note}
