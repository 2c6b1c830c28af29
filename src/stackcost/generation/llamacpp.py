"""llama.cpp through llama-cpp-python: the decoder converted to GGUF, quantized by llama.cpp.

The decoder's weights go to an f32 GGUF file (gguf.py, the layout of llama.cpp's own
convert_hf_to_gguf.py), then llama.cpp's quantizer makes Q8_0 (w8) or Q4_0 (w4; Q4_K_M
with the backend's w4_type option) of it.
Decoding is llama-cpp-python's Llama driven token by token through Llama.eval (one
llama_decode per call), greedy argmax over the last logits read back with
llama_get_logits_ith, so EOS never stops it and stackcost times each step itself.

An fp32 cell keeps its KV cache in f32 (llama.cpp's default is f16) so that its logits
can be held to fp32's tolerance; quantized cells keep llama.cpp's default f16 cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from stackcost.backends.llamacpp import BATCH_ONE
from stackcost.generation.base import TOKENIZER_FILES, Generation, Generator, OnToken
from stackcost.generation.gguf import FTYPES, METHOD

if TYPE_CHECKING:
    import numpy as np

PRECISIONS = frozenset({"fp32", "w8", "w4"})


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass
class LlamaCppGenerator(Generator):
    api: ClassVar[str] = "llama-cpp-python Llama (low-level eval)"
    timing: ClassVar[str] = (
        "step loop (Llama.eval of the prompt, then of each token; the token known when its "
        "logits are read back with llama_get_logits_ith and argmaxed)"
    )
    # llama.cpp's default f16 cache; an fp32 cell's instance says 4 (see __post_init__).
    kv_bytes_per_element: ClassVar[float] = 2.0
    precisions: ClassVar[frozenset[str]] = PRECISIONS
    requires: ClassVar[tuple[str, ...]] = ("llama_cpp", "gguf", "transformers")
    # PyPI has only llama-cpp-python's source: the install compiles llama.cpp (minutes).
    install: ClassVar[str] = "pip install 'stackcost[llamacpp]'"

    def __post_init__(self) -> None:
        self._llm: Any = None
        self._path: Path | None = None
        if self.decoder.cell.precision == "fp32":
            self.kv_bytes_per_element = 4.0  # type: ignore[misc]  # f32 cache, set in prepare

    def prepare(self) -> None:
        import gguf
        import llama_cpp

        from stackcost.backends import load_backend
        from stackcost.backends.base import Unsupported

        cell = self.decoder.cell
        precision = cell.precision
        if precision not in PRECISIONS:
            raise Unsupported(f"llama.cpp rung runs {sorted(PRECISIONS)}, not {precision}")
        ftype = FTYPES[precision]
        if precision == "w4":
            ftype = load_backend("llama.cpp").option(cell, "w4_type")
        versions = {"llama_cpp": llama_cpp.__version__, "gguf": _version("gguf", gguf)}
        directory, record = self._gguf(ftype, versions)
        self._path = directory / record["file"]
        loaded = self._load(self._path)
        self._n_vocab = self._llm.n_vocab()
        self.details.update(
            {
                "llama_cpp": versions["llama_cpp"],
                "gguf_version": versions["gguf"],
                "gguf": str(self._path),
                "gguf_bytes": self._path.stat().st_size,
                "ftype": ftype,
                "quantization": {**FTYPES, "w4": ftype} if precision == "w4" else dict(FTYPES),
                "kv_type": "f32" if precision == "fp32" else "f16",
                "n_threads": cell.threads,
                **loaded,
                "flash_attn": False,
                "conversion": METHOD,
                **record,
            }
        )

    def _gguf(self, ftype: str, versions: dict[str, str]) -> tuple[Path, dict[str, Any]]:
        """The folder holding the decoder's GGUF file of `ftype`, and its record: taken from
        the artifact cache where there is one, else written into the workdir."""
        from stackcost.generation.gguf import quantize, write_gguf

        decoder, cell = self.decoder, self.decoder.cell
        precision = cell.precision

        def make(directory: Path) -> dict[str, Any]:
            f32 = directory / "model-f32.gguf"
            converted = write_gguf(decoder.model, f32, decoder.own_tokenizer)
            record: dict[str, Any] = {"convert": converted, "tokenizer": converted["tokenizer"]}
            if precision == "fp32":
                record["file"] = f32.name
                return record
            out = directory / f"model-{ftype.lower()}.gguf"
            record["quantize"] = quantize(f32, out, ftype, cell.threads)
            f32.unlink()  # only the quantized file is loaded; the f32 one is as large as the model
            record["file"] = out.name
            return record

        if decoder.cache is not None:
            key = {
                "artifact": "gguf",
                "model": type(decoder.model).__name__,
                "config": decoder.config.to_json_string(use_diff=False),
                "weights": decoder.weights_digest,
                "tokenizer": _digest(decoder.own_tokenizer),
                "precision": precision,
                "ftype": ftype,
                "method": METHOD,
                **versions,
            }
            return decoder.cache.reuse_or_make(key, make)
        directory = decoder.workdir / "gguf"
        directory.mkdir(parents=True, exist_ok=True)
        return directory, make(directory)

    def _load(self, path: Path) -> dict[str, int]:
        """llama.cpp's Llama over the GGUF file, sized for the cell; its context and batch."""
        import llama_cpp

        cell = self.decoder.cell
        prompt_len = cell.sizes["prompt_len"]
        n_ctx = _round_up(prompt_len + cell.sizes["new_tokens"], 256)
        n_batch = max(512, _round_up(prompt_len, 64))  # the whole prompt in one llama_decode
        kv_type = llama_cpp.GGML_TYPE_F32 if cell.precision == "fp32" else llama_cpp.GGML_TYPE_F16
        self._llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=cell.threads,
            n_threads_batch=cell.threads,
            logits_all=False,  # only the last position's logits are read, prefill or step
            type_k=kv_type,
            type_v=kv_type,
            flash_attn=False,
            seed=0,
            verbose=False,
        )
        return {"n_ctx": n_ctx, "n_batch": n_batch}

    def _last_logits(self) -> np.ndarray:
        import llama_cpp
        import numpy as np

        ptr = llama_cpp.llama_get_logits_ith(self._llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    def generate(self, ids: np.ndarray, new_tokens: int, on_token: OnToken = None) -> Generation:
        import numpy as np

        from stackcost.backends.base import Unsupported

        if ids.shape[0] != 1:
            raise Unsupported(BATCH_ONE)
        llm = self._llm
        prompt = [int(t) for t in ids[0]]
        tokens: list[int] = []
        token_ns: list[int] = []
        llm.reset()  # the next eval drops the cache past position 0
        start_ns = time.perf_counter_ns()
        llm.eval(prompt)
        while True:
            token = int(self._last_logits().argmax())
            token_ns.append(time.perf_counter_ns())
            tokens.append(token)
            if on_token is not None:
                on_token(len(tokens) - 1)
            if len(tokens) == new_tokens:
                break
            llm.eval([token])
        return Generation(np.asarray([tokens], dtype=np.int64), start_ns, token_ns)

    def teacher_forced(self, ids: np.ndarray, prompt_len: int) -> np.ndarray:
        import numpy as np

        llm = self._llm
        steps = ids.shape[1] - prompt_len + 1
        if ids.shape[1] > llm.n_ctx():
            raise ValueError(f"{ids.shape[1]} tokens exceed the context of {llm.n_ctx()}")
        out = np.empty((ids.shape[0], steps, self._n_vocab), dtype=np.float32)
        for row in range(ids.shape[0]):  # one sequence at a time, the cache reset between
            seq = [int(t) for t in ids[row]]
            llm.reset()
            llm.eval(seq[:prompt_len])
            out[row, 0] = self._last_logits()
            for i, token in enumerate(seq[prompt_len:], start=1):
                llm.eval([token])
                out[row, i] = self._last_logits()
        return out

    @property
    def gguf_path(self) -> Path:
        """The GGUF file written and verified here: what llama.cpp's server loads."""
        assert self._path is not None, "prepare() first"
        return self._path

    def weight_bytes(self) -> int:
        """The GGUF file: its weights as llama.cpp reads them (and a small vocabulary)."""
        assert self._path is not None, "prepare() first"
        return self._path.stat().st_size

    def gathered_bytes(self) -> int:
        assert self._path is not None, "prepare() first"
        return gguf_gathered_bytes(self._path)


def gguf_gathered_bytes(path: Path) -> int:
    """token_embd.weight's bytes in the GGUF file; 0 when the file has no output.weight,
    since llama.cpp's LM head then reads token_embd whole every step (tied)."""
    from gguf import GGUFReader

    tensors = {t.name: t for t in GGUFReader(path).tensors}
    if "output.weight" not in tensors or "token_embd.weight" not in tensors:
        return 0
    return int(tensors["token_embd.weight"].n_bytes)


def _digest(tokenizer: Path | None) -> str | None:
    """sha256 over a checkpoint's tokenizer files (the GGUF file holds its vocabulary)."""
    if tokenizer is None:
        return None
    import hashlib

    h = hashlib.sha256()
    for name in TOKENIZER_FILES:
        if (tokenizer / name).is_file():
            h.update(name.encode() + b"\0" + (tokenizer / name).read_bytes())
    return h.hexdigest()


def _version(name: str, module: Any) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return str(getattr(module, "__version__", "unknown"))
