"""stackcost: measure what each layer of the deep-learning software stack costs."""

from __future__ import annotations

__version__ = "0.1.0"

from stackcost.api import load, run  # noqa: E402

__all__ = ["__version__", "load", "run"]
