"""What every publication figure shares: text kept literal, log₂ size axes, a grid of
panels, and saving as PNG (200 dpi) and PDF under a file name no other figure took."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

DPI = 200


def plain(text: object) -> str:
    """Matplotlib reads '$...$' as math; a model name must stay literal."""
    return str(text).replace("$", r"\$")


def log2_x(ax, values: list[int], label: str) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(values))))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(f"{label}, log₂ scale")


def grid(n: int) -> tuple[int, int]:
    cols = min(3, n)
    return math.ceil(n / cols), cols


def finish_panels(fig: Figure, axes, used: int, handles: dict, ncols: int = 5) -> None:
    """Hide the grid's panels past the `used` first, and draw one legend of `handles`
    (label: artist) below them all."""
    for ax in axes[used:]:
        ax.set_visible(False)
    fig.legend(
        list(handles.values()),
        [plain(s) for s in handles],
        loc="outside lower center",
        ncols=min(len(handles), ncols),
        frameon=False,
    )


def save(fig: Figure, out_dir: Path, stem: str, used: set[str]) -> list[Path]:
    name, i = stem, 2
    while name in used:  # two model names can share a slug
        name, i = f"{stem}-{i}", i + 1
    used.add(name)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=DPI)
    # The layout is solved; freezing it halves the cost of the second format.
    fig.set_layout_engine("none")
    fig.savefig(paths[1])
    return paths
