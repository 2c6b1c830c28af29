"""stackcost: measure what each layer of the deep-learning software stack costs."""

from __future__ import annotations

from typing import Any

from stackcost.version import __version__

__all__ = ["__version__", "environment", "load", "merge", "run"]


def __getattr__(name: str) -> Any:
    # Lazy: worker processes import this package first and should not pay for the API.
    if name in ("run", "load", "merge", "environment"):
        from stackcost import api

        return getattr(api, name)
    raise AttributeError(name)
