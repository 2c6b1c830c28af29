"""One module per engine the serve scenario drives (serving/engine.py's contract), and
the one table that says which rung each serves: a rung's engine is built from the rung's
prepared and verified generator, so it serves the weights the generator was checked on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stackcost.generation.base import Generator
    from stackcost.serving.engine import Engine


def _transformers(generator: Generator, new_tokens: int) -> Engine:
    from stackcost.serving.engines.transformers_cb import TransformersEngine

    return TransformersEngine(generator.decoder.model, new_tokens)


# backend name -> (what it batches with, how to build it from the verified generator)
ENGINES: dict[str, tuple[str, Callable[[Generator, int], Engine]]] = {
    "eager": ("transformers ContinuousBatchingManager", _transformers),
}


def engine_for(backend: str) -> Callable[[Generator, int], Engine] | None:
    entry = ENGINES.get(backend)
    return None if entry is None else entry[1]
