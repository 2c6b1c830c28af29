"""stackcost: measure what each layer of the deep-learning software stack costs."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "load", "run"]


def __getattr__(name: str) -> Any:
    # Lazy: worker processes import this package first and should not pay for the API.
    if name in ("run", "load"):
        from stackcost import api

        return getattr(api, name)
    raise AttributeError(name)
