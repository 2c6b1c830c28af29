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

    sizes = generator.decoder.cell.sizes
    return TransformersEngine(
        generator.decoder.model, new_tokens, sizes["prompt_len"] * 2 + new_tokens
    )  # lengths may reach 2x the axes, as the llama.cpp server's context below


def _openvino(generator: Generator, new_tokens: int) -> Engine:
    from stackcost.generation.openvino import OpenVINOGenAIGenerator
    from stackcost.serving.engines.openvino_cb import OpenVINOEngine

    assert isinstance(generator, OpenVINOGenAIGenerator)
    return OpenVINOEngine(generator.model_dir, generator.compile_config)


def _llama_server(generator: Generator, new_tokens: int) -> Engine:
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
    context = cell.sizes["prompt_len"] * 2 + new_tokens  # lengths may reach 2x the axes
    return LlamaServerEngine(
        binary, generator.gguf_path, cell.threads, int(backend.option(cell, "slots")),
        -(-context // 256) * 256, generator.details.get("kv_type", "f32"),
        generator.decoder.workdir / "llama-server.log",
    )  # fmt: skip


def _ortgenai(generator: Generator, new_tokens: int) -> Engine:
    from stackcost.generation.onnxruntime import OrtGenAIGenerator
    from stackcost.serving.engines.ortgenai_engine import OrtGenAIEngine

    assert isinstance(generator, OrtGenAIGenerator)
    return OrtGenAIEngine(generator.model)


class EngineUnavailable(RuntimeError):
    """The engine cannot run on this machine (its binary is missing): the cell is
    `unavailable`, with how to get it."""


# backend name -> (what it batches with, how to build it from the verified generator)
ENGINES: dict[str, tuple[str, Callable[[Generator, int], Engine]]] = {
    "eager": ("transformers ContinuousBatchingManager", _transformers),
    "openvino": ("OpenVINO GenAI ContinuousBatchingPipeline", _openvino),
    "llama.cpp": ("llama.cpp's server, parallel slots, over HTTP", _llama_server),
    "onnxruntime": ("onnxruntime-genai Engine", _ortgenai),
}


def engine_for(backend: str) -> Callable[[Generator, int], Engine] | None:
    entry = ENGINES.get(backend)
    return None if entry is None else entry[1]
