"""One module per engine the serve scenario drives (serving/engine.py's contract), and
the one table that says which rung each serves: a rung's engine is built from the rung's
prepared and verified generator, so it serves the weights the generator was checked on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stackcost.cell import Cell
    from stackcost.generation.base import Generator
    from stackcost.serving.engine import Engine
    from stackcost.serving.lengths import Longest


def _transformers(generator: Generator, longest: Longest) -> Engine:
    from stackcost.serving.engines.transformers_cb import TransformersEngine

    return TransformersEngine(generator.decoder.model, longest.output, longest.tokens)


def _openvino(generator: Generator, longest: Longest) -> Engine:
    from stackcost.generation.openvino import OpenVINOGenAIGenerator
    from stackcost.serving.engines.openvino_cb import OpenVINOEngine

    assert isinstance(generator, OpenVINOGenAIGenerator)
    return OpenVINOEngine(generator.model_dir, generator.compile_config)


def _llama_server(generator: Generator, longest: Longest) -> Engine:
    from stackcost.backends import load_backend
    from stackcost.generation.llamacpp import LlamaCppGenerator
    from stackcost.serving.engines.llamacpp_server import BUILD, LlamaServerEngine, find_server

    assert isinstance(generator, LlamaCppGenerator)
    cell = generator.decoder.cell
    backend = load_backend("llama.cpp")
    given = backend.option(cell, "server")
    binary = find_server(given)
    if binary is None:
        raise EngineUnavailable(f"llama-server {given!r} not found: {BUILD}")
    context = longest.tokens
    return LlamaServerEngine(
        binary, generator.gguf_path, cell.threads, int(backend.option(cell, "slots")),
        -(-context // 256) * 256, generator.details.get("kv_type", "f32"),
        generator.decoder.workdir / "llama-server.log",
    )  # fmt: skip


def _ortgenai(generator: Generator, longest: Longest) -> Engine:
    from stackcost.generation.onnxruntime import OrtGenAIGenerator
    from stackcost.serving.engines.ortgenai_engine import OrtGenAIEngine

    assert isinstance(generator, OrtGenAIGenerator)
    return OrtGenAIEngine(generator.model)


class EngineUnavailable(RuntimeError):
    """The engine cannot run on this machine (its binary is missing): the cell is
    `unavailable`, with how to get it."""


# backend name -> (what it batches with, how to build it from the verified generator and
# the longest request the sweep may send)
ENGINES: dict[str, tuple[str, Callable[[Generator, Longest], Engine]]] = {
    "eager": ("transformers ContinuousBatchingManager", _transformers),
    "openvino": ("OpenVINO GenAI ContinuousBatchingPipeline", _openvino),
    "llama.cpp": ("llama.cpp's server, parallel slots, over HTTP", _llama_server),
    "onnxruntime": ("onnxruntime-genai Engine", _ortgenai),
}


def why_not(cell: Cell) -> str | None:
    """Why a serve cell cannot run, decided before any worker starts (the runner stores it
    `unsupported`, and refuses a grid where no cell can run), or None."""
    if cell.backend not in ENGINES:
        served = ", ".join(f"{b} ({e})" for b, (e, _) in ENGINES.items())
        return f"serve has no engine for {cell.backend} yet; it serves {served}"
    if cell.batch_size != 1:
        return (
            f"a serve request is one sequence (batch 1), not {cell.batch_size}: "
            "the engine batches the requests that are in flight"
        )
    if cell.precision != "fp32":
        return f"serve runs fp32 engines here, not {cell.precision}"
    return None


def engine_for(backend: str) -> Callable[[Generator, Longest], Engine] | None:
    entry = ENGINES.get(backend)
    return None if entry is None else entry[1]
