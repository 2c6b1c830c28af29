"""onnxruntime-genai: the model builder's ONNX export of the decoder, driven by og.Generator.

prepare() saves the decoder as a transformers checkpoint, gives it a tokenizer (the builder
loads one and copies it beside the model; random weights come with none, and nothing is
downloaded), and runs `onnxruntime_genai.models.builder` for the cpu execution provider at
the cell's precision. The built directory (model.onnx, its .data, genai_config.json) is an
artifact the run's repetitions share.

EOS: genai 0.18 checks eos_token_id against [0, vocab), so no id is out of reach, and a row
that emits one is padded from then on. generate() therefore sets min_length = max_length,
which masks EOS until the last token, as transformers' min_new_tokens does: exactly
new_tokens per row, EOS never chosen. teacher_forced() feeds tokens that may include EOS,
and there it uses a model whose eos/pad is an id absent from the sequence instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from stackcost.backends import load_backend
from stackcost.backends.base import Unsupported
from stackcost.generation.base import TOKENIZER_FILES, Generation, Generator, OnToken

if TYPE_CHECKING:
    from stackcost.generation.base import Decoder

# stackcost precision -> the builder's --precision.
BUILDER_PRECISION = {"fp32": "fp32", "w8": "int8", "w4": "int4"}
PRECISIONS = frozenset(BUILDER_PRECISION)
# The quantized precisions as stackcost.quantize.onnx makes w8/w4 for the onnxruntime rung:
# MatMulNBits, asymmetric (a zero point per group), groups of 32 along K. Its accuracy level
# is the backend's option (-o onnxruntime.accuracy_level): 4, the default and the builder's
# own for CPUs, quantizes each activation row to int8 for the int8 dot product, as
# llama.cpp's Q8_0/Q4_0 and OpenVINO's CPU dynamic quantization do; 1 dequantizes the
# weights and multiplies in fp32 (weight-only in the strict sense), 45x slower per token
# on llama-150m w8 here (docs/results/generation.md).
QUANT_OPTIONS = {"is_symmetric": "false", "block_size": "32"}
# Logits that make greedy search pick the forced token: every other one this far below.
FORCE_OFF = -1e30


class OrtGenAIGenerator(Generator):
    api: ClassVar[str] = "onnxruntime-genai Generator"
    timing: ClassVar[str] = "step loop (generate_next_token, timed around each call)"
    precisions: ClassVar[frozenset[str]] = PRECISIONS
    requires: ClassVar[tuple[str, ...]] = ("onnxruntime_genai", "onnx", "transformers")
    install: ClassVar[str] = "pip install 'stackcost[generate]'"
    kv_bytes_per_element: ClassVar[float] = 4.0  # the cpu builds keep past/present in fp32

    _model: Any = None
    _model_dir: Path | None = None
    _stop_ids: frozenset[int] = frozenset()  # the eos ids: one ends its row
    _forcing: tuple[int, Any] | None = None  # (eos/pad id, og.Model) for teacher forcing

    def prepare(self) -> None:
        import onnxruntime_genai as og

        decoder = self.decoder
        precision = decoder.cell.precision
        if precision not in PRECISIONS:
            raise Unsupported(
                f"precision {precision}: the onnxruntime-genai builder makes "
                f"{', '.join(sorted(PRECISIONS))}"
            )
        builder_precision = BUILDER_PRECISION[precision]
        level = load_backend("onnxruntime").option(decoder.cell, "accuracy_level")
        options = {**QUANT_OPTIONS, "accuracy_level": level} if precision != "fp32" else {}
        config = json.loads(decoder.config.to_json_string(use_diff=False))
        key = {
            "artifact": "onnxruntime-genai model builder",
            "builder": og.__version__,
            "weights": decoder.weights_digest,
            "precision": builder_precision,
            "options": options,
            "execution_provider": "cpu",
            "config": json.dumps(config, sort_keys=True, default=str),
        }

        def make(directory: Path) -> dict[str, Any]:
            return _build(decoder, directory, builder_precision, options)

        if decoder.cache is not None:
            home, record = decoder.cache.reuse_or_make(key, make)
        else:
            home = decoder.workdir / "onnxruntime-genai"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir(parents=True)
            record = make(home)
        self._model_dir = home / "model"
        genai = json.loads((self._model_dir / "genai_config.json").read_text())
        eos = genai["model"]["eos_token_id"]
        self._stop_ids = frozenset(eos if isinstance(eos, list) else [eos])
        self._model = og.Model(self._config())
        self.details.update(
            generator=f"onnxruntime-genai {og.__version__} model builder",
            builder_precision=builder_precision,
            builder_options=options,
            model_dir=str(self._model_dir),
            tokenizer=record["tokenizer"],
            quantization=(
                {
                    "mapping": f"{precision} = builder --precision {builder_precision} "
                    + " ".join(f"{k}={v}" for k, v in options.items()),
                    "graph": record["quantization"],
                }
                if options
                else None
            ),
            kv_cache_dtype=record["kv_cache_dtype"],
            eos_token_id=eos,
            eos_handling="min_length = max_length (EOS masked until the last token)",
            session_options={
                "intra_op_num_threads": decoder.cell.threads,
                "inter_op_num_threads": 1,
            },
        )
        if "artifact" in record:
            self.details["artifact"] = record["artifact"]

    @property
    def model(self) -> Any:
        """The og.Model prepared and verified here: what onnxruntime-genai's Engine serves
        (serving/engines/ortgenai_engine.py)."""
        assert self._model is not None, "prepare() first"
        return self._model

    def _config(self, overlay: dict[str, Any] | None = None) -> Any:
        """The built model's config with the cell's threads (an overlay at load, not an edit
        of genai_config.json: the artifact is shared by cells whose threads differ)."""
        import onnxruntime_genai as og

        config = og.Config(str(self._model_dir))
        # Scalars replace; a list in an overlay is appended to, never given one.
        session = {"intra_op_num_threads": self.decoder.cell.threads, "inter_op_num_threads": 1}
        config.overlay(json.dumps({"model": {"decoder": {"session_options": session}}}))
        if overlay:
            config.overlay(json.dumps(overlay))
        return config

    def _generator(self, model: Any, batch: int, max_length: int, min_length: int) -> Any:
        import onnxruntime_genai as og

        params = og.GeneratorParams(model)
        params.set_search_options(
            do_sample=False, batch_size=batch, max_length=max_length, min_length=min_length
        )
        return og.Generator(model, params)

    def generate(self, ids: np.ndarray, new_tokens: int, on_token: OnToken = None) -> Generation:
        batch, prompt_len = ids.shape
        total = prompt_len + new_tokens
        generator = self._generator(self._model, batch, total, total)
        prompt = np.ascontiguousarray(ids, dtype=np.int32)
        tokens = np.empty((batch, new_tokens), dtype=np.int64)
        token_ns: list[int] = []
        start_ns = time.perf_counter_ns()
        generator.append_tokens(prompt)  # the prefill runs here
        for step in range(new_tokens):
            generator.generate_next_token()
            tokens[:, step] = generator.get_next_tokens()  # host numpy: the step is done
            token_ns.append(time.perf_counter_ns())
            if on_token is not None:
                on_token(step)
        return Generation(tokens=tokens, start_ns=start_ns, token_ns=token_ns)

    def teacher_forced(self, ids: np.ndarray, prompt_len: int) -> np.ndarray:
        """genai 0.18 takes append_tokens once per generator when batch > 1, so each later
        token goes in as the greedy pick of logits that allow only it (set_logits, then
        generate_next_token): the same cached decode step a generated token takes.
        get_logits() runs that step and returns the new last position's logits."""
        batch, total = ids.shape
        vocab = int(self.decoder.config.vocab_size)
        model = self._forcing_model(ids)
        generator = self._generator(model, batch, total, 0)
        generator.append_tokens(np.ascontiguousarray(ids[:, :prompt_len], dtype=np.int32))
        rows = [generator.get_logits().reshape(batch, -1, vocab)[:, -1].copy()]
        forced = np.full((batch, vocab), FORCE_OFF, dtype=np.float32)
        for t in range(prompt_len, total):
            forced.fill(FORCE_OFF)
            forced[np.arange(batch), ids[:, t]] = 0.0
            generator.set_logits(forced)
            generator.generate_next_token()
            got = generator.get_next_tokens()
            if not np.array_equal(got, ids[:, t]):
                raise RuntimeError(f"teacher forcing fed {got.tolist()}, not {ids[:, t].tolist()}")
            rows.append(generator.get_logits().reshape(batch, -1, vocab)[:, -1].copy())
        return np.stack(rows, axis=1).astype(np.float32, copy=False)

    def _forcing_model(self, ids: np.ndarray) -> Any:
        """The prepared model unless a token to feed is EOS, which would end its row (genai
        pads it from then on); else one loaded with eos = pad = an id absent from `ids`
        (an empty eos list falls back to pad), kept for the next call."""
        import onnxruntime_genai as og

        present = set(np.unique(ids).tolist())
        if not self._stop_ids & present:
            return self._model
        if self._forcing is not None and self._forcing[0] not in present:
            return self._forcing[1]
        vocab = int(self.decoder.config.vocab_size)
        free = next((i for i in range(vocab) if i not in present), None)
        if free is None:
            raise RuntimeError("teacher forcing needs an id the sequence lacks, for eos and pad")
        model = og.Model(self._config({"model": {"eos_token_id": free, "pad_token_id": free}}))
        self._forcing = (free, model)
        return model

    def weight_bytes(self) -> int:
        """The ONNX graph and its external initializers, as the builder wrote them."""
        assert self._model_dir is not None, "prepare() first"
        genai = json.loads((self._model_dir / "genai_config.json").read_text())
        onnx = self._model_dir / genai["model"]["decoder"]["filename"]
        data = onnx.with_name(onnx.name + ".data")
        return onnx.stat().st_size + (data.stat().st_size if data.exists() else 0)

    def gathered_bytes(self) -> int:
        """The initializers the input_ids Gather reads rows of (GatherBlockQuantized: with
        its scales), when nothing else reads them; 0 when the LM head shares them."""
        import onnx

        assert self._model_dir is not None, "prepare() first"
        genai = json.loads((self._model_dir / "genai_config.json").read_text())
        path = self._model_dir / genai["model"]["decoder"]["filename"]
        return onnx_gathered_bytes(onnx.load(str(path), load_external_data=False))


def onnx_gathered_bytes(model: Any) -> int:
    """See OrtGenAIGenerator.gathered_bytes: `model` an onnx ModelProto."""
    import math

    from onnx import helper

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    tables = {
        name
        for node in graph.node
        if node.op_type.startswith("Gather") and len(node.input) > 1
        and node.input[1] == "input_ids"
        for name in (node.input[0], *node.input[2:])
        if name in initializers
    }  # fmt: skip
    if any(
        not (r.op_type.startswith("Gather") and r.input[1] == "input_ids")
        for name in tables
        for r in readers[name]
    ):
        return 0  # tied: the LM head reads the table whole every step

    def size(t: Any) -> int:
        external = {e.key: e.value for e in t.external_data}
        if "length" in external:
            return int(external["length"])
        if t.raw_data:
            return len(t.raw_data)
        return math.prod(t.dims) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize

    return sum(size(initializers[name]) for name in tables)


def _build(
    decoder: Decoder, directory: Path, precision: str, options: dict[str, str]
) -> dict[str, Any]:
    """Run the model builder on the decoder, saved with a tokenizer, into directory/model."""
    from onnxruntime_genai.models import builder

    from stackcost.quantize import quiet

    checkpoint = directory / "checkpoint"
    scratch = directory / "builder-cache"
    out = directory / "model"
    log = io.StringIO()
    extra = [f"{k}={v}" for k, v in {**options, "hf_token": "false"}.items()]
    try:
        # The builder prints its progress, and the MatMulNBits quantizer logs each node.
        with (
            contextlib.redirect_stdout(log),
            contextlib.redirect_stderr(log),
            quiet("", "onnxruntime.quantization.matmul_nbits_quantizer"),
        ):
            tokenizer = _save_checkpoint(decoder, checkpoint)
            parsed = builder.parse_extra_options(
                None, str(checkpoint), str(out), precision, "cpu", str(scratch), extra
            )
            builder.create_model(
                None, str(checkpoint), str(out), precision, "cpu", str(scratch), **parsed
            )
    except NotImplementedError as error:  # an architecture the builder has no class for
        # Its message names the scratch folder it was given; the class is what the user knows.
        saved = (getattr(decoder.model.config, "architectures", None) or ["this decoder"])[0]
        raise Unsupported(
            f"onnxruntime-genai's model builder has no path for {saved} "
            f"({decoder.model.config.model_type})"
        ) from error
    except Exception as error:
        raise RuntimeError(
            f"onnxruntime-genai's model builder failed: {error}\n{log.getvalue()[-4000:]}"
        ) from error
    finally:
        # Only the built model is the artifact: the checkpoint was its input.
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return {"tokenizer": tokenizer, **_inspect(out)}


def _save_checkpoint(decoder: Decoder, checkpoint: Path) -> str:
    """save_pretrained plus a tokenizer: a checkpoint's own, or one WordLevel token per id,
    built offline (no training text: the builder only loads it and copies it; generation
    is on ids)."""
    from tokenizers import Tokenizer, models
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    decoder.model.save_pretrained(checkpoint)
    config = decoder.config
    vocab = int(config.vocab_size)

    def first(value: Any) -> int | None:
        return value[0] if isinstance(value, list) and value else value

    bos, eos = first(config.bos_token_id), first(config.eos_token_id)
    if eos is None:  # the builder needs one; the saved config.json alone gets it
        eos = vocab - 1
        saved = json.loads((checkpoint / "config.json").read_text())
        (checkpoint / "config.json").write_text(json.dumps({**saved, "eos_token_id": eos}))
    if own := decoder.own_tokenizer:  # a checkpoint's own: copied as it is
        copied = [n for n in TOKENIZER_FILES if (own / n).is_file()]
        for name in copied:
            shutil.copyfile(own / name, checkpoint / name)
        return f"the checkpoint's own ({', '.join(copied)})"
    word = models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0")
    tokenizer = Tokenizer(word)
    tokenizer.pre_tokenizer = WhitespaceSplit()
    special = {"eos_token": f"t{eos}", "unk_token": "t0"}
    if bos is not None:
        special["bos_token"] = f"t{bos}"
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special).save_pretrained(checkpoint)
    return f"built offline: tokenizers WordLevel, one token per id ({vocab}), eos t{eos}"


def _inspect(out: Path) -> dict[str, Any]:
    """What the builder made of the weights and the KV cache, read from the graph."""
    import onnx

    genai = json.loads((out / "genai_config.json").read_text())
    graph = onnx.load(
        str(out / genai["model"]["decoder"]["filename"]), load_external_data=False
    ).graph
    nbits: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "MatMulNBits":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            zero_points = len(node.input) > 3 and bool(node.input[3])
            kind = (
                f"int{attrs['bits']} weights, groups of {attrs['block_size']}, "
                f"{'asymmetric' if zero_points else 'symmetric'}, "
                f"accuracy_level {attrs.get('accuracy_level', 0)} (MatMulNBits)"
            )
            nbits[kind] = nbits.get(kind, 0) + 1
    float_matmuls = sum(node.op_type == "MatMul" for node in graph.node)
    past = next(i for i in graph.input if i.name.startswith("past_key_values"))
    kv_dtype = onnx.helper.tensor_dtype_to_np_dtype(past.type.tensor_type.elem_type).name
    return {
        "quantization": {"quantized": nbits, "float MatMul": float_matmuls},
        "kv_cache_dtype": kv_dtype,
    }
