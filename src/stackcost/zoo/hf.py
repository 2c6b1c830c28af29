"""Hugging Face architectures, built offline from their configs with random weights.

`hf:<model_type>` names any architecture transformers knows (hf:bert, hf:gpt2, hf:vit,
...); the zoo's bert-base, gpt2, t5-small, vit-b16 and wav2vec2-base are the same adapter
with a fixed config. Nothing is downloaded: the model is `AutoConfig.for_model(type,
**overrides)` passed to `AutoModel.from_config` (or the type's classification head).

Weights (what `--init torch-default` means here): transformers' own `_init_weights`, run
at construction from the torch seed that `build_model` sets right before (mostly
normal(0, config.initializer_range) for linear and embedding weights, zero biases, unit
LayerNorms), so the same ModelRef gives the same weights on every backend. The other init
schemes are applied on top, as for every zoo model.

The modality (what the model is fed) follows transformers' auto mappings: a type with an
image classification head is fed pixel_values, one with an audio classification head
input_values, anything else token ids (and decoder ids for encoder-decoders). Neither
torch nor transformers is imported at the top: the CLI imports this module cheaply.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from stackcost.workload import Input, Workload
from stackcost.zoo import tasks
from stackcost.zoo.custom import ZooError

if TYPE_CHECKING:
    from torch import nn

    from stackcost.cell import ModelRef

BUILDER = "stackcost.zoo.hf:build"
EXAMPLES = "bert, gpt2, t5, vit, wav2vec2"
DEFAULT_SEQ_LEN = 128
# A decoder with its LM head: fed a prompt, it generates (mode generate).
CAUSAL_LM = tasks.CAUSAL_LM
DEFAULT_PROMPT_LEN, DEFAULT_NEW_TOKENS = 128, 64
DEFAULT_SAMPLES = 16000  # 1 s at 16 kHz
DEFAULT_RESOLUTION = 224  # for image types whose config has no image_size
# Config fields stackcost sets itself, and the flag that sets each instead.
OWNED = {
    "use_cache": "stackcost sets use_cache=false (one full forward, no KV cache)",
    "return_dict": "stackcost sets return_dict=true (every output is verified by name)",
    "num_labels": "give the head's width with --num-classes",
    "id2label": "give the head's width with --num-classes",
    "label2id": "give the head's width with --num-classes",
}
# Settable config properties a user may reasonably override (the rest are internals).
EXTRA_KEYS = ("attn_implementation", "output_attentions")
# Config fields that are sizes (widths, depths, counts of heads): an override must be a
# positive integer. Matched on the name: hidden_size, num_hidden_layers, n_embd, d_model...
SIZE_KEY = re.compile(
    r"(^(n|num|d)_)|(^|_)(size|dim|layers|heads|channels|positions|embd|embeddings|experts|"
    r"width|depth|ctx|inner|ff|model|groups)($|_)"
)
BYTES_PER_PARAMETER = 4  # fp32, as every model is built
# The config fields that count a mixture of experts' experts, across transformers' types.
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def size_problem(key: str, value: Any) -> str | None:
    """Why a -c override of a size field is not one (a width of -4, zero layers); None
    otherwise. Needs no transformers: the parent asks it as the spec is validated."""
    integer = isinstance(value, int) and not isinstance(value, bool)
    if SIZE_KEY.search(key) and integer and value < 1:
        return f"config {key}={value}: a size must be a positive integer"
    return None


# -- the type: modality, config, head -------------------------------------------------------


def _mappings() -> Any:
    from transformers.models.auto import configuration_auto, modeling_auto

    return configuration_auto, modeling_auto


def modality(model_type: str) -> str:
    """Modality: "image", "audio" or "text": which classification head the auto maps give the type."""
    _, auto = _mappings()
    if model_type in auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return "image"
    if model_type in auto.MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES:
        return "audio"
    return "text"


def check_type(model_type: str) -> None:
    """ZooError unless transformers has a config and a base model for `model_type`."""
    configs, auto = _mappings()
    if model_type not in configs.CONFIG_MAPPING_NAMES:
        close = difflib.get_close_matches(model_type, list(configs.CONFIG_MAPPING_NAMES), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ZooError(f"unknown Hugging Face model type {model_type!r} ({hint}e.g. {EXAMPLES})")
    if model_type not in auto.MODEL_MAPPING_NAMES:
        raise ZooError(
            f"Hugging Face model type {model_type!r} has a config but no base model "
            f"stackcost can build (e.g. {EXAMPLES})"
        )


def config_keys(config_class: type) -> set[str]:
    """The fields a config of this class takes (aliases and settable properties too)."""
    keys = set(getattr(config_class, "attribute_map", {}))
    if dataclasses.is_dataclass(config_class):
        keys |= {f.name for f in dataclasses.fields(config_class)}
    else:  # transformers before 5: configs are plain classes, fields set in __init__
        keys |= set(vars(config_class())) | set(inspect.signature(config_class).parameters)
    for key in EXTRA_KEYS:
        attr = inspect.getattr_static(config_class, key, None)
        if key == "attn_implementation" or (isinstance(attr, property) and attr.fset is not None):
            keys.add(key)
    return {k for k in keys if not k.startswith("_")}


def _defaults(config_class: type) -> dict[str, Any]:
    try:
        return config_class().to_dict()
    except Exception:  # a composite config that needs its parts: no list fields known
        return {}


def _as_field(label: str, key: str, value: Any, default: Any) -> Any:
    """-c values are scalars; a list field (wav2vec2's conv_dim) takes "16,16,16" or one
    number for every element of its default."""
    if not isinstance(default, (list, tuple)) or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return [value] * len(default)
    try:
        return [json.loads(part) for part in str(value).split(",")]
    except ValueError:
        raise ZooError(
            f"{label}: config {key}={value!r}: give numbers separated by commas, e.g. "
            f"{','.join(map(str, default))}"
        ) from None


def _label(ref: ModelRef, model_type: str) -> str:
    """How messages name the model: 'hf:bert', or a zoo entry with its type, 'bert-base (hf:bert)'."""
    return ref.name if ref.is_hf else f"{ref.name} (hf:{model_type})"


def make_config(
    ref: ModelRef, model_type: str, config: Mapping[str, Any], sizes: Mapping[str, int] | None
) -> Any:
    """The type's config with the entry's and the user's overrides; ZooError when a key is
    not one of the type's fields or a value does not fit it."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    check_type(model_type)
    config_class = CONFIG_MAPPING[model_type]
    known = config_keys(config_class)
    label = _label(ref, model_type)
    for key in ref.config:
        if key in OWNED:
            raise ZooError(f"{label}: -c {key} is not allowed ({OWNED[key]})")
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ZooError(f"{label} has no config field {key!r}{hint}")
        if problem := size_problem(key, ref.config[key]):
            raise ZooError(f"{label}: {problem}")
    defaults = _defaults(config_class)
    given = {k: _as_field(label, k, v, defaults.get(k)) for k, v in ref.config.items()}
    merged = {**config, **given, "use_cache": False, "return_dict": True}
    if ref.head == "classification":
        merged["num_labels"] = ref.num_classes or 2
    try:
        cfg = AutoConfig.for_model(model_type, **merged)
    except Exception as exc:  # transformers' validation: a wrong type, an impossible value
        text = " ".join(str(exc).split())
        raise ZooError(f"{label}: config rejected: {type(exc).__name__}: {text}") from None
    if sizes and "resolution" in sizes and hasattr(cfg, "image_size"):
        cfg.image_size = sizes["resolution"]
    if ref.head == "classification" and getattr(cfg, "pad_token_id", 0) is None:
        # GPT-2-style heads pool at the last non-pad token and refuse a batch without one.
        cfg.pad_token_id = getattr(cfg, "eos_token_id", None) or 0
    return cfg


def _head_class(model_type: str, head: str | None) -> Any:
    import transformers

    if head in (None, "base"):
        return transformers.AutoModel
    _, auto = _mappings()
    if head == CAUSAL_LM:
        if model_type not in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            raise ZooError(f"hf:{model_type} has no causal language-model head in transformers")
        return transformers.AutoModelForCausalLM
    if head in tasks.TASKS:  # a checkpoint's own head (zoo/tasks.py)
        return tasks.head_class(tasks.TASKS[head], model_type)
    kind = modality(model_type)
    names, auto_class = {
        "image": (auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES, "ForImageClassification"),
        "audio": (auto.MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES, "ForAudioClassification"),
        "text": (auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, "ForSequenceClassification"),
    }[kind]
    if model_type not in names:
        raise ZooError(f"hf:{model_type} has no {kind} classification head in transformers")
    return getattr(transformers, "AutoModel" + auto_class)


def build(
    ref: ModelRef,
    sizes: Mapping[str, int],
    *,
    model_type: str,
    config: Mapping[str, Any],
    head: str | None = None,
) -> nn.Module:
    """The model with random weights from transformers' `_init_weights` (seeded by the
    caller), in eval mode. Images: the config's image_size is the cell's resolution.
    `head` is the entry's own (a decoder's causal-lm), or a checkpoint's task; the user's
    --head wins."""
    if ref.checkpoint_path:
        return _load_checkpoint(ref, model_type, head)
    cfg = make_config(ref, model_type, config, sizes)
    model = _head_class(model_type, ref.head or head).from_config(cfg)
    return model.float().eval()


# -- a checkpoint folder (zoo/checkpoint.py): its own config and weights -------------------


def checkpoint_config(ref: ModelRef) -> Any:
    """The folder's config, read offline, with the two fields stackcost owns (OWNED)."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(ref.checkpoint_path, local_files_only=True)
    except Exception as exc:  # an unknown model_type, a config transformers rejects
        text = " ".join(str(exc).split())
        raise ZooError(f"checkpoint {ref.checkpoint_path}: config rejected: {text}") from None
    cfg.use_cache, cfg.return_dict = False, True
    task = checkpoint_task(ref, cfg)
    if task is not None and task.name == "sequence-classification" and cfg.pad_token_id is None:
        # GPT-2-style heads pool at the last non-pad token and refuse a batch without one;
        # the ids stackcost feeds hold no padding, so any id only names the last position.
        cfg.pad_token_id = getattr(cfg, "eos_token_id", None) or 0
    return cfg


def checkpoint_task(ref: ModelRef, cfg: Any) -> tasks.Task | None:
    """The task of the head the checkpoint was saved with (zoo/tasks.py); None: its base
    model."""
    return tasks.task_of(cfg, f"checkpoint {ref.checkpoint_path}")


def saved_class(cfg: Any) -> str:
    """The class `save_pretrained` recorded, or the config's type's base model."""
    architectures = getattr(cfg, "architectures", None) or []
    return str(architectures[0]) if architectures else f"the base {type(cfg).__name__} model"


def _weights_problem(
    model: nn.Module, prefix: str, found: Mapping[str, tuple | None]
) -> str | None:
    """Why the weights in the files do not fit the model the config builds (on the meta
    device): a tensor of another shape, one the model lacks, or one the files lack (a
    tied weight found under its twin's name is there). Names are compared without the
    base model's prefix, as transformers loads a base model from a head's checkpoint."""

    def bare(name: str) -> str:
        return name.removeprefix(prefix + ".") if prefix else name

    files = {bare(k): v for k, v in found.items()}
    params = model.state_dict(keep_vars=True)
    wanted = {bare(k): tuple(v.shape) for k, v in params.items()}
    for name, shape in wanted.items():
        if name in files and files[name] is not None and tuple(files[name]) != shape:
            return (
                f"{name} is {'x'.join(map(str, files[name]))} in the weights but "
                f"{'x'.join(map(str, shape))} in the model its config builds"
            )
    unexpected = sorted(set(files) - set(wanted))
    if unexpected:
        return (
            f"{len(unexpected)} tensor(s) in the weights that the model its config builds "
            f"has no place for, e.g. {unexpected[0]}"
        )
    aliases: dict[int, set[str]] = {}  # a tied weight's names: any one of them will do
    for name, tensor in params.items():
        aliases.setdefault(id(tensor), set()).add(bare(name))
    missing = sorted(
        bare(name) for name, tensor in params.items() if not aliases[id(tensor)] & files.keys()
    )
    if missing:
        return (
            f"{len(missing)} of the model's {len(wanted)} tensors are not in the weights, "
            f"e.g. {missing[0]}"
        )
    return None


def loaded_names(
    model: nn.Module, found: Mapping[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...] | None]:
    """The files' tensor names as transformers loads them into `model`: transformers 5
    renames older layouts at load (ViT's `attention.attention.key` is `k_proj`), so the
    saved names are passed through its own conversion mapping. A tensor a converter
    builds from several (fused projections) has its shape from the converter: None."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (
            WeightConverter,
            WeightRenaming,
            rename_source_key,
        )
    except ImportError:  # transformers before 5 loads the names as saved
        return dict(found)
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    out: dict[str, tuple[int, ...] | None] = {}
    for name, shape in found.items():
        renamed, converted = rename_source_key(name, renamings, converters)
        out[renamed] = None if converted else shape
    return out


def check_checkpoint_weights(ref: ModelRef, model: nn.Module) -> None:
    """ZooError (one line) when the folder's weights do not fit `model`, the model its
    config builds on the meta device (check_buildable): checked in the probe from the
    safetensors headers, before anything runs."""
    from stackcost.zoo.checkpoint import shapes

    prefix = getattr(model, "base_model_prefix", "") or ""
    found = loaded_names(model, shapes(ref.checkpoint_path, ref.trust_pickle))
    if problem := _weights_problem(model, prefix, found):
        raise ZooError(
            f"checkpoint {ref.checkpoint_path}: its config does not match its weights: {problem}"
        )


def _load_checkpoint(ref: ModelRef, model_type: str, head: str | None) -> nn.Module:
    cfg = checkpoint_config(ref)
    model, info = _head_class(model_type, head).from_pretrained(
        ref.checkpoint_path,
        config=cfg,
        local_files_only=True,
        use_safetensors=None if ref.trust_pickle else True,  # None: safetensors first
        output_loading_info=True,
    )
    # transformers fills what it did not find with random weights and only warns: a model
    # that is not the checkpoint's must not be measured as if it were.
    lost = [k for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)]
    if lost:
        raise ZooError(
            f"checkpoint {ref.checkpoint_path}: loading left {lost[0].replace('_', ' ')}: "
            f"{sorted(map(str, info[lost[0]]))[:3]}"
        )
    return model.float().eval()


# -- the workload ------------------------------------------------------------------------


def _receptive_field(kernels: Any, strides: Any) -> int:
    """Fewest samples a conv stack turns into one frame."""
    need = 1
    for k, s in reversed(list(zip(kernels, strides, strict=True))):
        need = (need - 1) * int(s) + int(k)
    return need


def _describe(ref: ModelRef, model_type: str, cfg: Any, entry: Workload | None) -> str:
    if ref.checkpoint_path:
        files = ", ".join(f"{n} sha256 {h[:12]}" for n, h in ref.checkpoint["files"].items())
        task = checkpoint_task(ref, cfg)
        return (
            f"Hugging Face {type(cfg).__name__.removesuffix('Config')} ({model_type}) "
            f"checkpoint {ref.checkpoint_path}, {saved_class(cfg)} "
            f"({task.name if task else 'base model'}): its own weights ({files})"
        )
    if entry is not None:
        # The entry's parameter count holds for its own config only.
        what = re.sub(r"\s*\([^()]*params\)\s*$", "", entry.description)
    else:
        what = f"Hugging Face {type(cfg).__name__.removesuffix('Config')} ({model_type})"
    head = "classification head" if ref.head == "classification" else "base model"
    over = ", ".join(f"{k}={v}" for k, v in ref.config.items())
    init_range = getattr(cfg, "initializer_range", None)
    factor = getattr(cfg, "initializer_factor", None)  # T5: std = factor / sqrt(width)
    if isinstance(init_range, (int, float)):
        std = f"initializer_range {init_range:g}"
    elif isinstance(factor, (int, float)):
        std = f"initializer_factor {factor:g} over the layer width"
    else:
        std = "the type's own scales"
    return (
        f"{what}, {head}{f', config {over}' if over else ''}; random weights from "
        f"transformers' _init_weights (normal, {std}) drawn from the seed"
    )


def check_buildable(
    ref: ModelRef, model_type: str, cfg: Any, label: str, head: str | None = None
) -> nn.Module:
    """The model built on torch's meta device (shapes only, nothing allocated): a config
    it cannot be built from is refused here, in the probe, not as a failed cell, and its
    weights must fit this machine's memory. Returns that shapes-only model."""
    import psutil
    import torch

    try:
        with torch.device("meta"):
            model = _head_class(model_type, head or ref.head).from_config(cfg)
    except Exception as exc:  # transformers or torch on a config that builds nothing
        text = " ".join(str(exc).split())
        raise ZooError(
            f"{label}: cannot be built from its config: {type(exc).__name__}: {text}"
        ) from None
    count = sum(p.numel() for p in model.parameters())
    need, have = count * BYTES_PER_PARAMETER, psutil.virtual_memory().total
    if need > have:
        raise ZooError(
            f"{label}: {count:.3g} parameters, {need / 2**30:.3g} GiB of fp32 weights, more "
            f"than this machine's {have / 2**30:.1f} GiB of memory"
        )
    return model


def position_limit(model: nn.Module, positions: int) -> int:
    """The longest sequence the model's position table holds. RoBERTa-style embeddings
    (roberta, xlm-roberta, camembert, ...) number positions from their padding id + 1, so
    max_position_embeddings = 514 holds 512 tokens; they are the ones whose position
    table has a padding index."""
    from torch import nn

    for name, module in model.named_modules():
        table = name.endswith("position_embeddings") and isinstance(module, nn.Embedding)
        if table and module.padding_idx is not None:
            return max(1, positions - module.padding_idx - 1)
    return positions


def experts(cfg: Any) -> str | None:
    """How the config routes among experts ("num_local_experts=8"); None for a dense model."""
    for key in EXPERT_KEYS:
        count = getattr(cfg, key, None)
        if isinstance(count, int) and not isinstance(count, bool) and count > 1:
            return f"{key}={count}"
    return None


def _one_modality(model_type: str, kind: str, cfg: Any) -> None:
    """A dual encoder (CLIP, SigLIP ...) fed pixels or audio alone still wants its text
    tower's input_ids; stackcost feeds one modality, so it names the towers instead."""
    if kind == "text" or "text_config" not in (getattr(cfg, "sub_configs", None) or {}):
        return
    configs, _ = _mappings()
    towers = sorted(t for t in configs.CONFIG_MAPPING_NAMES if t.startswith(f"{model_type}_"))
    hint = f": try {' or '.join('hf:' + t for t in towers[:2])}" if towers else ""
    raise ZooError(
        f"hf:{model_type} pairs a text tower with its {kind} one and needs both inputs; "
        f"stackcost feeds one modality{hint}"
    )


class _Source(NamedTuple):
    """Where a Hugging Face model's config comes from, and what it is built as."""

    model_type: str
    cfg: Any  # the config the model is built from (transformers' PretrainedConfig)
    base_config: dict[str, Any]  # a zoo entry's own overrides, under the user's
    head: str | None
    entry: Workload | None  # the zoo entry it is, if any
    task: tasks.Task | None  # a checkpoint's saved task, if any


class _Fed(NamedTuple):
    """What one modality feeds a model, the sizes it allows, and its domain."""

    inputs: tuple[Input, ...]
    sizes: dict[str, int]
    minimum: dict[str, int]
    maximum: dict[str, int]
    domain: str
    channels: int


def hf_workload(ref: ModelRef) -> Workload:
    """What an "hf:<model_type>" model, or a zoo Hugging Face entry with -c/--head, is fed
    and how big it may be, from its config; ZooError (one line) on a bad type or key."""
    model_type, cfg, base_config, head, entry, task = _source(ref)
    _head_class(model_type, head)  # a head the type lacks is refused here, not in a cell
    kind = task.modality if task else modality(model_type)
    _one_modality(model_type, kind, cfg)
    shapes_only = check_buildable(ref, model_type, cfg, _label(ref, model_type), head)
    if ref.checkpoint_path:
        check_checkpoint_weights(ref, shapes_only)
    num_classes = (ref.num_classes or 2) if ref.head == "classification" else 0
    if task is not None and task.labelled:
        num_classes = int(cfg.num_labels)
    if kind == "image":
        fed = _image_fed(cfg)
    elif kind == "audio":
        fed = _audio_fed(model_type, cfg)
    else:
        fed = _text_fed(ref, model_type, cfg, head, shapes_only)
    domain, sizes, minimum, maximum = fed.domain, fed.sizes, fed.minimum, fed.maximum
    if entry is not None:
        # The entry's defaults where they still apply: its sizes unless an override set
        # them (image_size), its domain.
        domain = entry.domain
        for axis, value in entry.sizes.items():
            if axis in sizes and not (axis == "resolution" and "image_size" in ref.config):
                sizes[axis] = value
    for axis, value in sizes.items():  # a default the config no longer allows is clipped
        sizes[axis] = max(minimum.get(axis, 1), min(value, maximum.get(axis, value)))
    return Workload(
        name=entry.name if entry else ref.name,
        description=_describe(ref, model_type, cfg, entry),
        builder=BUILDER,
        inputs=fed.inputs,
        sizes=sizes,
        minimum=minimum,
        maximum=maximum,
        keyword=True,
        domain=domain,
        num_classes=num_classes,
        in_channels=fed.channels,
        experts=experts(cfg),
        params={
            "model_type": model_type,
            "config": base_config,
            **({"head": entry.params["head"]} if entry and "head" in entry.params else {}),
            **({"head": head} if ref.checkpoint_path and head else {}),
        },
    )


def _source(ref: ModelRef) -> _Source:
    """The model's type, config and head: a checkpoint's saved ones, an hf:TYPE's
    defaults, or a zoo entry's, each under the user's overrides."""
    from stackcost.zoo import MODELS

    entry: Workload | None = None
    task: tasks.Task | None = None
    if ref.checkpoint_path:
        cfg = checkpoint_config(ref)
        task = checkpoint_task(ref, cfg)
        model_type, base_config, head = cfg.model_type, {}, task.name if task else None
        check_type(model_type)
    else:
        if ref.is_hf:
            model_type, base_config = ref.name.removeprefix("hf:"), {}
        else:
            entry = MODELS[ref.name]
            model_type, base_config = entry.params["model_type"], dict(entry.params["config"])
        head = ref.head or (entry.params.get("head") if entry is not None else None)
        cfg = make_config(ref, model_type, base_config, None)
    return _Source(model_type, cfg, base_config, head, entry, task)


def _image_fed(cfg: Any) -> _Fed:
    """Pixels, square at the config's image_size; at least one patch where it has them."""
    minimum: dict[str, int] = {}
    channels = int(getattr(cfg, "num_channels", 3))
    inputs = (Input("pixel_values", ("batch", channels, "resolution", "resolution")),)
    sizes = {"resolution": int(getattr(cfg, "image_size", DEFAULT_RESOLUTION))}
    patch = getattr(cfg, "patch_size", None)
    if isinstance(patch, int):
        minimum["resolution"] = patch
    domain = "vision-transformer" if patch else "vision"
    return _Fed(inputs, sizes, minimum, {}, domain, channels)


def _audio_fed(model_type: str, cfg: Any) -> _Fed:
    """A raw waveform, at least the conv stack's receptive field long."""
    if not hasattr(cfg, "conv_kernel"):
        raise ZooError(
            f"hf:{model_type} is not fed raw audio (input_values); stackcost feeds "
            "waveform encoders such as wav2vec2, hubert, wavlm"
        )
    inputs = (Input("input_values", ("batch", "samples")),)
    sizes = {"samples": DEFAULT_SAMPLES}
    minimum = {"samples": _receptive_field(cfg.conv_kernel, cfg.conv_stride)}
    return _Fed(inputs, sizes, minimum, {}, "speech", 1)


def _text_fed(
    ref: ModelRef, model_type: str, cfg: Any, head: str | None, shapes_only: nn.Module
) -> _Fed:
    """Token ids and their mask (and decoder ids for an encoder-decoder), as long as the
    position table holds; a causal LM's prompt and the tokens it generates after it."""
    maximum: dict[str, int] = {}
    vocab = getattr(cfg, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise ZooError(f"hf:{model_type} has no vocab_size: not a text model stackcost feeds")
    length = "prompt_len" if head == CAUSAL_LM else "seq_len"
    ids = Input("input_ids", ("batch", length), "int64", "ids", vocab)
    mask = Input("attention_mask", ("batch", length), "int64", "mask")
    inputs: tuple[Input, ...] = (ids, mask)
    if head == CAUSAL_LM:
        domain = "generation"
    elif getattr(cfg, "is_encoder_decoder", False):
        if ref.head == "classification":
            # T5/BART-style heads pool at <eos> tokens, which random ids do not hold.
            raise ZooError(
                f"hf:{model_type} --head classification pools at <eos> tokens, which "
                "stackcost's random token ids do not contain; use the base model"
            )
        inputs += (Input("decoder_input_ids", ("batch", "seq_len"), "int64", "ids", vocab),)
        domain = "seq2seq"
    else:
        _, auto = _mappings()
        causal = model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        masked = model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
        domain = "decoder" if causal and not masked else "nlp"
    sizes = {"seq_len": DEFAULT_SEQ_LEN}
    if head == CAUSAL_LM:  # the prompt and what follows it
        sizes = {"prompt_len": DEFAULT_PROMPT_LEN, "new_tokens": DEFAULT_NEW_TOKENS}
    positions = getattr(cfg, "max_position_embeddings", None)  # n_positions via alias
    if isinstance(positions, int) and positions > 0:
        positions = position_limit(shapes_only, positions)
        maximum[length] = positions
        if head == CAUSAL_LM:
            maximum["new_tokens"] = positions
    return _Fed(inputs, sizes, {}, maximum, domain, 3)
