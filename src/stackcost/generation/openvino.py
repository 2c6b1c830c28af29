"""openvino-genai's LLMPipeline over a stateful OpenVINO IR exported here from the decoder.

Export (no optimum-intel: 2.2.0 would move torch, transformers and tokenizers): the
transformers model is traced by `openvino.convert_model` with its past keys and values as
inputs and its presents as outputs, then given optimum-intel's stateful form by hand: a
`beam_idx` input gathering each past along the batch, the pasts made state
(`apply_make_stateful_transformation`), and each state initialized empty from the batch
of `input_ids`. A tiny BPE tokenizer with the model's vocabulary is trained in process and
converted by openvino_tokenizers: the pipeline needs one, though ids go in and come out.

w8 / w4 are NNCF's weight compression of that ov.Model (stackcost.quantize.openvino, the
same modes and record as the openvino rung), made before it is saved.

The pipeline runs with ATTENTION_BACKEND=SDPA: the stateful model as exported, the graph
teacher_forced checks through ov.Core. Its default on CPU, PA, rewrites the model to paged
attention for its continuous-batching scheduler, a graph nothing here could verify.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from stackcost.backends.artifacts import RECORD
from stackcost.backends.base import Unsupported
from stackcost.generation.base import Generation, Generator

if TYPE_CHECKING:
    import numpy as np
    import openvino as ov
    import torch

    from stackcost.generation.base import OnToken

PRECISIONS = frozenset({"fp32", "w8", "w4"})
MODEL = "openvino_model.xml"  # LLMPipeline's names in its model directory
TOKENIZER = "openvino_tokenizer.xml"
DETOKENIZER = "openvino_detokenizer.xml"
ATTENTION_BACKEND = "SDPA"  # the exported stateful graph itself, not PA's rewrite of it
# The CPU plugin keeps a stateful model's KV cache u8 unless told (2026.4); f32 keeps it
# out of the comparison with eager fp32 (u8 put tiny-llama's logits 1.6e-3 off).
KV_CACHE_PRECISION = "f32"
EXPORT_FORMAT = 2  # bump when the export below changes: part of the artifact key


class OpenVINOGenAIGenerator(Generator):
    api: ClassVar[str] = "openvino-genai LLMPipeline"
    timing: ClassVar[str] = (
        "streamer callback (StreamerBase.write, once per step with its token ids) at batch 1; "
        "at batch > 1, where openvino-genai refuses a streamer, the pipeline's own per-step "
        "readings (perf_metrics.raw_metrics.m_new_token_times, steady_clock: the same clock)"
    )
    kv_bytes_per_element: ClassVar[float] = 4.0  # KV_CACHE_PRECISION f32
    precisions: ClassVar[frozenset[str]] = PRECISIONS
    requires: ClassVar[tuple[str, ...]] = ("openvino", "openvino_genai", "openvino_tokenizers")
    install: ClassVar[str] = "pip install 'stackcost[generate]'"

    _pipeline: Any = None
    _request: Any = None  # teacher_forced's infer request on the same IR
    _path: Path | None = None
    _config: dict[str, Any] | None = None

    def prepare(self) -> None:
        import openvino as ov
        import openvino_genai as og

        cell = self.decoder.cell
        if cell.precision not in PRECISIONS:
            raise Unsupported(
                f"precision {cell.precision}: openvino-genai builds {', '.join(sorted(PRECISIONS))}"
            )
        if self.decoder.cache is not None:
            home, record = self.decoder.cache.reuse_or_make(self._key(cell.precision), self._build)
        else:
            home = self.decoder.workdir / "openvino-genai"
            home.mkdir(parents=True, exist_ok=True)
            record = self._build(home)
        self._path = home
        # f32 for every precision: on a CPU with bf16 the plugin would otherwise run the
        # float parts (all of fp32, the activations of w8/w4) bf16 unasked.
        self._config = {
            "INFERENCE_PRECISION_HINT": "f32",
            "KV_CACHE_PRECISION": KV_CACHE_PRECISION,
            "INFERENCE_NUM_THREADS": cell.threads,
            "PERFORMANCE_HINT": "LATENCY",
            **record.get("compile_config", {}),
        }
        self._pipeline = og.LLMPipeline(
            str(home), "CPU", ATTENTION_BACKEND=ATTENTION_BACKEND, **self._config
        )
        self.details.update(
            {
                "runtime": f"openvino-genai {og.__version__}, openvino {ov.get_version()}",
                "model": str(home / MODEL),
                "format": "OpenVINO IR, stateful (KV cache as state; beam_idx input)",
                "export": record["export"],
                "tokenizer": record["tokenizer"],
                "quantization": record["quantization"],
                "compile_config": self._config,
                "attention_backend": ATTENTION_BACKEND,
                "kv_cache_precision": KV_CACHE_PRECISION,
                "artifact": record.get("artifact"),
            }
        )

    @property
    def model_dir(self) -> Path:
        """The prepared IR's folder (model and tokenizer IRs): what a serving pipeline
        (serving/engines/openvino_cb.py) is built from, so it runs the verified weights."""
        assert self._path is not None, "prepare() first"
        return self._path

    @property
    def compile_config(self) -> dict[str, Any]:
        """The plugin properties the pipeline was compiled with (precision, threads)."""
        assert self._config is not None, "prepare() first"
        return dict(self._config)

    def _key(self, precision: str) -> dict[str, Any]:
        return {
            "kind": "openvino-genai stateful IR",
            "format": EXPORT_FORMAT,
            "weights": self.decoder.weights_digest,
            "precision": precision,
            "versions": _versions(),
            "config": self.decoder.config.to_json_string(use_diff=False),
        }

    def _build(self, home: Path) -> dict[str, Any]:
        import openvino as ov

        from stackcost.quantize import quiet

        model = self.decoder.model
        precision = self.decoder.cell.precision
        cache = self.decoder.cache
        if precision != "fp32" and cache is not None:
            # A quantized IR starts from the run's fp32 export, made once for all of them.
            fp32, _ = cache.reuse_or_make(self._key("fp32"), self._build_fp32)
            ovm = ov.Core().read_model(str(fp32 / MODEL))
            for name in (TOKENIZER, DETOKENIZER):
                for part in (name, name.replace(".xml", ".bin")):
                    shutil.copyfile(fp32 / part, home / part)
            tokenizer = json.loads((fp32 / RECORD).read_text())["tokenizer"]
        else:
            with quiet("nncf", "transformers"):  # the tracer's warnings on shape branches
                ovm = _stateful(model)
            tokenizer = _tokenizer(home, model.config.vocab_size, self.decoder.own_tokenizer)
        quantization: dict[str, Any] | None = None
        compile_config: dict[str, Any] = {}
        if precision != "fp32":
            from stackcost.quantize.openvino import quantize_model

            # No calibration: weight-only modes read no activations.
            built = quantize_model(ovm, precision, None, lambda x: x)
            ovm, compile_config = built.model, built.config
            quantization = built.record.model_dump()
        ov.save_model(ovm, str(home / MODEL), compress_to_fp16=False)
        return {
            "export": (
                "openvino.convert_model (TorchScript trace of the transformers model, past "
                "keys/values as inputs) + beam_idx Gather + apply_make_stateful_transformation"
            ),
            "tokenizer": tokenizer,
            "quantization": quantization,
            "compile_config": compile_config,
        }

    def _build_fp32(self, home: Path) -> dict[str, Any]:
        fp32 = dataclasses.replace(
            self.decoder, cell=self.decoder.cell.model_copy(update={"precision": "fp32"})
        )
        return OpenVINOGenAIGenerator(fp32)._build(home)

    def generate(self, ids: np.ndarray, new_tokens: int, on_token: OnToken = None) -> Generation:
        import numpy as np
        import openvino as ov
        import openvino_genai as og

        ids = np.ascontiguousarray(ids, dtype=np.int64)
        batch = ids.shape[0]
        if batch > 1 and on_token is not None:
            raise Unsupported(
                "openvino-genai 2026.4 streams batch 1 only: at batch > 1 its per-step "
                "readings come after the call, too late to tell each token as it is ready"
            )
        # No min_new_tokens: genai's would mask the stop ids (the tokenizer's EOS, id 2 of
        # the tiny llama) until the last step; ignore_eos alone runs exactly new_tokens with
        # every id reachable, as eager's greedy_config (eos_token_id None) does.
        config = og.GenerationConfig(max_new_tokens=new_tokens, ignore_eos=True, do_sample=False)
        inputs = og.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
        stamps: list[int] = []
        streamer = _streamer(stamps, on_token) if batch == 1 else None
        start_ns = time.perf_counter_ns()
        result = self._pipeline.generate(inputs, config, streamer)
        end_ns = time.perf_counter_ns()

        metrics = result.perf_metrics
        if batch > 1:
            # ms on steady_clock, which is CLOCK_MONOTONIC as perf_counter_ns is (Linux);
            # the bounds check below would catch another clock.
            stamps = [round(ms * 1e6) for ms in metrics.raw_metrics.m_new_token_times]
        if len(stamps) != new_tokens or not start_ns <= stamps[0] <= stamps[-1] <= end_ns:
            raise RuntimeError(
                f"{len(stamps)} token readings for {new_tokens} tokens, or readings outside "
                f"the call ({start_ns}..{end_ns}): {stamps[:2]}..{stamps[-1:]}"
            )
        tokens = np.asarray(result.tokens, dtype=np.int64)
        self.details["last_perf_metrics"] = {
            "ttft_ms": metrics.get_ttft().mean,
            "tpot_ms": metrics.get_tpot().mean,
            "throughput_tokens_per_s": metrics.get_throughput().mean,
            "generate_ms": metrics.get_generate_duration().mean,
            "token_readings": "streamer" if batch == 1 else "raw_metrics.m_new_token_times",
        }
        return Generation(tokens=tokens, start_ns=start_ns, token_ns=stamps)

    def teacher_forced(self, ids: np.ndarray, prompt_len: int) -> np.ndarray:
        import numpy as np
        import openvino as ov

        if self._request is None:
            compiled = ov.Core().compile_model(str(self._path / MODEL), "CPU", self._config)
            self._request = compiled.create_infer_request()
            self.details["verified_through"] = (
                "ov.Core().compile_model of the same openvino_model.xml and config (CPU, "
                f"KV_CACHE_PRECISION={compiled.get_property('KV_CACHE_PRECISION').get_type_name()}): "
                "reset_state, the prompt as one infer, then one infer per token through "
                "the model's KV state"
            )
        request = self._request
        batch, length = ids.shape
        beam = np.arange(batch, dtype=np.int32)
        request.reset_state()
        steps = [(0, prompt_len)] + [(t, t + 1) for t in range(prompt_len, length)]
        logits = []
        for begin, end in steps:
            request.infer(
                {
                    "input_ids": np.ascontiguousarray(ids[:, begin:end], dtype=np.int64),
                    "attention_mask": np.ones((batch, end), dtype=np.int64),
                    "position_ids": np.tile(np.arange(begin, end, dtype=np.int64), (batch, 1)),
                    "beam_idx": beam,
                }
            )
            logits.append(request.get_tensor("logits").data[:, -1].astype(np.float32))
        return np.stack(logits, axis=1)

    def weight_bytes(self) -> int:
        return (self._path / MODEL).with_suffix(".bin").stat().st_size

    def gathered_bytes(self) -> int:
        """The constants behind the input_ids Gather's table (NNCF's compressed weight with
        its scales and zero points), when nothing else reads them; 0 when the LM head
        shares them."""
        import openvino as ov

        return ir_gathered_bytes(ov.Core().read_model(self._path / MODEL))


def ir_gathered_bytes(model: Any) -> int:
    """See OpenVINOGenAIGenerator.gathered_bytes: `model` an openvino Model."""

    def source(output: Any) -> Any:
        node = output.get_node()
        while node.get_type_name() == "Convert":
            node = node.input_value(0).get_node()
        return node

    total = 0
    for gather in model.get_ordered_ops():
        if gather.get_type_name() != "Gather":
            continue
        indices = source(gather.input_value(1))
        if indices.get_type_name() != "Parameter" or indices.get_friendly_name() != "input_ids":
            continue
        table, todo = {gather.get_name()}, [gather.input_value(0).get_node()]
        while todo:  # the decompression subgraph down to its constants
            node = todo.pop()
            if node.get_name() in table:
                continue
            if node.get_type_name() in ("Parameter", "ReadValue"):
                return 0  # not a weight table this can size
            table.add(node.get_name())
            todo += [v.get_node() for v in node.input_values()]
        inside = [n for n in model.get_ordered_ops() if n.get_name() in table and n != gather]
        for node in inside:
            for target in node.output(0).get_target_inputs():
                if target.get_node().get_name() not in table:
                    return 0  # tied: the LM head reads the table whole every step
        total += sum(n.get_byte_size() for n in inside if n.get_type_name() == "Constant")
    return total


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {
        name: version(name)
        for name in (
            "openvino",
            "openvino-genai",
            "openvino-tokenizers",
            "nncf",
            "torch",
            "transformers",
            "tokenizers",
        )
    }


def _stateful(model: torch.nn.Module) -> ov.Model:
    """`model` as optimum-intel's stateful IR: inputs input_ids, attention_mask,
    position_ids, beam_idx; output logits; each layer's key and value a state."""
    from openvino._offline_transformations import apply_make_stateful_transformation

    ovm = _traced(model)
    inputs, outputs = _name_ports(ovm, model.config.num_hidden_layers)
    _gather_by_beam(ovm, inputs)
    apply_make_stateful_transformation(ovm, dict(zip(inputs, outputs, strict=True)))
    _start_states_empty(ovm)
    return ovm


def _with_past(model: torch.nn.Module) -> torch.nn.Module:
    """`model` called with its past keys and values as one flat tuple of tensors (layer by
    layer, key then value) and returning (logits, *presents) in the same order."""
    import torch

    layers = model.config.num_hidden_layers
    # transformers 5.x renamed past_key_values to cache (the old name warns until 5.40).
    cache_arg = (
        "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    )

    class WithPast(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids, past):  # noqa: ANN001
            from transformers import DynamicCache
            from transformers.cache_utils import DynamicLayer

            cache = DynamicCache()
            cache.layers = []
            for i in range(layers):
                # Filled directly: DynamicCache's own init concatenates onto an empty 1-D
                # tensor, which the OpenVINO frontend cannot convert.
                layer = DynamicLayer()
                layer.keys, layer.values = past[2 * i], past[2 * i + 1]
                layer.dtype, layer.device = past[0].dtype, past[0].device
                layer.is_initialized = True
                cache.layers.append(layer)
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_arg: cache},
            )
            presents = [t for layer in out[cache_arg].layers for t in (layer.keys, layer.values)]
            return (out.logits, *presents)

    return WithPast(model)


def _traced(model: torch.nn.Module) -> ov.Model:
    """`model` with its past as inputs and presents as outputs, traced by OpenVINO."""
    import openvino as ov
    import torch

    config = model.config
    layers = config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    # Multi-head attention (GPT-2) keeps a key and value per head: no num_key_value_heads.
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    with_past = _with_past(model)
    # Traced with a past and more than one new token: the general path of the mask code
    # (its q_length == 1 and empty-cache shortcuts are the untaken branches).
    batch, past_len, new = 2, 3, 2
    past = tuple(torch.zeros(batch, kv_heads, past_len, head_dim) for _ in range(2 * layers))
    example = {
        "input_ids": torch.zeros(batch, new, dtype=torch.int64),
        "attention_mask": torch.ones(batch, past_len + new, dtype=torch.int64),
        "position_ids": torch.arange(past_len, past_len + new).expand(batch, new).contiguous(),
        "past": past,
    }
    with torch.no_grad():
        return ov.convert_model(with_past, example_input=example)


def _name_ports(ovm: ov.Model, layers: int) -> tuple[list[str], list[str]]:
    """Name the traced ports as optimum-intel does (past_key_values.N.key, logits,
    present.N.value, ...); the past inputs' names and the presents', pair by pair."""
    names = [f"{k}.{i}" for i in range(layers) for k in ("key", "value")]
    inputs = [f"past_key_values.{n.split('.')[1]}.{n.split('.')[0]}" for n in names]
    outputs = [f"present.{n.split('.')[1]}.{n.split('.')[0]}" for n in names]
    for port, name in zip(ovm.inputs[3:], inputs, strict=True):
        port.get_tensor().set_names({name})
    ovm.outputs[0].get_tensor().set_names({"logits"})
    for port, name in zip(ovm.outputs[1:], outputs, strict=True):
        port.get_tensor().set_names({name})
    return inputs, outputs


def _gather_by_beam(ovm: ov.Model, inputs: list[str]) -> None:
    """Add the beam_idx input, which reorders each past along the batch, as the pipeline
    expects to feed it."""
    import openvino as ov
    from openvino import opset13

    beam = opset13.parameter(name="beam_idx", dtype=ov.Type.i32, shape=ov.PartialShape([-1]))
    beam.output(0).get_tensor().add_names({"beam_idx"})
    ovm.add_parameters([beam])
    for name in inputs:
        port = ovm.input(name)
        consumers = port.get_target_inputs()
        gather = opset13.gather(port, beam, opset13.constant(0))
        for consumer in consumers:
            consumer.replace_source_output(gather.output(0))
    ovm.validate_nodes_and_infer_types()


def _start_states_empty(ovm: ov.Model) -> None:
    """Each state starts empty: (batch of input_ids, kv heads, 0, head_dim) zeros."""
    import numpy as np
    from openvino import opset13

    ids_shape = opset13.shape_of(ovm.input("input_ids"), output_type="i64")
    batch_dim = opset13.gather(ids_shape, opset13.constant([0]), opset13.constant(0))
    for op in ovm.get_ops():
        if op.get_type_name() == "ReadValue":
            dims = [d.min_length for d in op.get_output_partial_shape(0)]
            parts = [batch_dim] + [
                opset13.constant(np.array([d], dtype=np.int64)) for d in dims[1:]
            ]
            zero = opset13.constant(0.0, dtype=op.get_output_element_type(0))
            op.set_arguments([opset13.broadcast(zero, opset13.concat(parts, axis=0))])
    ovm.validate_nodes_and_infer_types()


def _tokenizer(home: Path, vocab_size: int, own: Path | None = None) -> str:
    """The checkpoint's own tokenizer (`own`, its folder), or a BPE tokenizer with exactly
    `vocab_size` ids and no merges (one token per id, built, not trained: training stops
    short of a large vocabulary), as openvino_tokenizers' IRs beside the model. Only the
    pipeline's plumbing reads it: ids go in, ids come out, and EOS is ignored."""
    import openvino as ov
    import openvino_tokenizers
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if own is not None:
        fast = AutoTokenizer.from_pretrained(own, local_files_only=True)
        what = f"the checkpoint's own ({type(fast).__name__}, {len(fast)} tokens)"
    else:
        specials = ["<unk>", "<s>", "</s>"]
        vocab = {t: i for i, t in enumerate(specials)}
        vocab.update({f"t{i}": i for i in range(len(specials), vocab_size)})
        bpe = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
        bpe.pre_tokenizer = pre_tokenizers.Whitespace()
        if bpe.get_vocab_size() != vocab_size:
            raise RuntimeError(f"built {bpe.get_vocab_size()} tokens, the model has {vocab_size}")
        fast = PreTrainedTokenizerFast(
            tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
        )
        what = f"BPE, {vocab_size} ids, no merges (tokenizers, built offline)"
    tokenizer, detokenizer = openvino_tokenizers.convert_tokenizer(fast, with_detokenizer=True)
    ov.save_model(tokenizer, str(home / TOKENIZER))
    ov.save_model(detokenizer, str(home / DETOKENIZER))
    return f"{what}, converted by openvino_tokenizers {openvino_tokenizers.__version__}"


def _streamer(stamps: list[int], on_token: OnToken) -> Any:
    """A streamer taking the clock as each step's ids arrive: write() gets token ids (a
    plain callback gets detokenized text, held back until it forms whole characters)."""
    import openvino_genai as og

    class Stamps(og.StreamerBase):
        def write(self, token: int | list[int]) -> Any:
            now = time.perf_counter_ns()
            for _ in token if isinstance(token, list) else [token]:
                stamps.append(now)
                if on_token is not None:
                    on_token(len(stamps) - 1)
            return og.StreamingStatus.RUNNING

        def end(self) -> None:
            pass

    return Stamps()
