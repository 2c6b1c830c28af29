"""llama.cpp: the local-inference community's runtime, through llama-cpp-python.

It generates tokens only (mode generate): a GGUF written from the same weights
(generation/gguf.py), quantized by llama.cpp's own quantizer for w8 (Q8_0) and w4 (Q4_0,
or Q4_K_M with -o llama.cpp.w4_type=Q4_K_M), decoded by generation/llamacpp.py. llama-cpp-python's `Llama` serves one sequence, so a
batch above 1 is refused before any worker starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stackcost.backends.base import Availability, Backend, Capabilities, Option

if TYPE_CHECKING:
    from stackcost.cell import Cell

BATCH_ONE = (
    "llama-cpp-python's Llama decodes one sequence at a time; batch > 1 needs llama.cpp's "
    "server or its batched API"
)


class LlamaCppBackend(Backend):
    name = "llama.cpp"
    description = "llama.cpp via llama-cpp-python (GGUF from the same weights; generate only)"
    capabilities = Capabilities(modes=frozenset({"generate"}))
    generator = "stackcost.generation.llamacpp:LlamaCppGenerator"
    torch_profiled = False
    # w4_type: the llama.cpp file type w4 is quantized to. Q4_0 (the default): 32-weight
    # blocks, one scale each. Q4_K_M: k-quants in 256-weight super-blocks, some tensors
    # (attn_v, ffn_down in half the layers, output) kept at Q6_K; llama.cpp falls back to
    # another type, tensor by tensor, where a row is not a multiple of 256 (the file's
    # tensor types are recorded, details.quantize.tensor_types).
    # server, slots: --scenario serve runs llama.cpp's own server (llama-server, built from
    # llama-cpp-python's sdist: serving/engines/llamacpp_server.py) with this many slots.
    options = {
        "w4_type": Option("Q4_0", ("Q4_0", "Q4_K_M"), "w4's llama.cpp file type"),
        "server": Option("llama-server", (), "serve: the llama-server binary (a path, or on PATH)"),
        "slots": Option("4", ("1", "2", "4", "8", "16"), "serve: the server's parallel slots"),
    }

    def available(self) -> Availability:
        return Availability.needs_modules(
            "llama_cpp", "gguf", install="pip install 'stackcost[llamacpp]' (compiles llama.cpp)"
        )

    def why_not(self, cell: Cell) -> str | None:
        if cell.mode == "generate" and cell.batch_size > 1:
            return BATCH_ONE
        return super().why_not(cell)

    def prepare(self, model, example, cell, ctx):
        raise NotImplementedError("llama.cpp generates tokens only: --scenario generate")
