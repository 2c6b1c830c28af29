"""Which model, head, data and sizes a training request trains, and what it refuses.

A model is trained as a classifier on labelled samples (an image dataset for a model fed
images, else synthetic inputs drawn as it declares them) or, a causal LM, on text. What
a zoo entry's table row answers is refused before the model is asked anything; the rest
once the probe has learnt the model's workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stackcost.api.training_request import TrainingRequest
from stackcost.data.stdlib_text import NAME as TEXT_DATASET
from stackcost.errors import SpecError
from stackcost.runspec.run import model_ref
from stackcost.scenarios.train import TEXT_TRAINERS
from stackcost.workload import Workload
from stackcost.zoo.hf import CAUSAL_LM

if TYPE_CHECKING:
    from stackcost.cell import ModelRef
    from stackcost.data import DatasetInfo
    from stackcost.runspec.train import TrainSpec


def trains_text(request: TrainingRequest) -> bool:
    """Whether the model learns text as a causal LM: the dataset says so, else the head,
    else a zoo decoder's own head (llama-tiny trains on stdlib-text by default)."""
    from stackcost import zoo
    from stackcost.data import DATASETS

    if request.dataset is not None:  # an unknown name is refused by _classes
        return request.dataset in DATASETS and DATASETS[request.dataset].fed == "text"
    if request.head is not None:
        return bool(request.head == CAUSAL_LM)
    entry = zoo.MODELS.get(request.model)
    return entry is not None and entry.params.get("head") == CAUSAL_LM


def check_before_probe(request: TrainingRequest) -> None:
    """What needs no probe is refused before it: a zoo entry's inputs are in its table
    row, and so is what a causal LM may train through."""
    from stackcost import zoo

    if request.model in zoo.MODELS:
        check_fed_images(request.model, zoo.MODELS[request.model], request.dataset)
    if trains_text(request):
        _check_text_request(request)


def check_fed_images(name: str, workload: Workload, dataset: str | None) -> str:
    """The dataset to train on (digits for a model fed images, stdlib-text for a causal
    LM, else synthetic): an image dataset only for a model fed images, text only for a
    causal LM. A zoo entry's inputs are its kind's whatever -c and --head change, so its
    table row answers before the probe."""
    from stackcost.data import DATASETS

    causal = workload.domain == "generation"
    dataset = dataset or (
        "digits" if workload.image_input else TEXT_DATASET if causal else "synthetic"
    )
    if dataset not in DATASETS:
        raise SpecError(f"unknown dataset {dataset!r} (allowed: {', '.join(DATASETS)})")
    fed = DATASETS[dataset].fed
    if fed == "text" and not causal:
        raise SpecError(
            f"--dataset {dataset} trains a causal language model: {name} has no LM head "
            "(a decoder trains on it with --head causal-lm)"
        )
    if workload.image_input is None and fed == "images" and dataset != "synthetic":
        fed_with = ", ".join(f"{i.name} ({i.dtype})" for i in workload.inputs)
        allowed = f"{TEXT_DATASET}, or synthetic" if causal else "synthetic"
        raise SpecError(
            f"--dataset {dataset}: {name} is fed {fed_with}, not images "
            f"(allowed: {allowed}, inputs drawn as the model declares them)"
        )
    return dataset


def _check_text_request(request: TrainingRequest) -> None:
    """A causal LM trains on text through the scenario's own torch loop: the rungs whose
    step is torch autograd over the model (eager, inductor, torchscript); the others train
    classifiers. It reads --prompt-len tokens and generates none. A zoo decoder's
    vocabulary is in its table row unless -c changes it."""
    from stackcost import zoo

    others = [b for b in request.backends if b not in TEXT_TRAINERS]
    if others:
        raise SpecError(
            f"a causal LM trains on {TEXT_DATASET} through {', '.join(TEXT_TRAINERS)} only; "
            f"{', '.join(others)} train{'s' if len(others) == 1 else ''} classifiers"
        )
    if "new_tokens" in request.sizes:
        raise SpecError(
            "--new-tokens is about generation: a causal LM trains on --prompt-len tokens "
            "of context, scored on the next token at each"
        )
    if request.model in zoo.MODELS and "vocab_size" not in request.config:
        check_vocabulary(TEXT_DATASET, zoo.MODELS[request.model])


def check_vocabulary(dataset: str, workload: Workload) -> None:
    """Text's tokenizer is learnt at the model's vocabulary size, which must leave room
    for merges beside the bytes."""
    from stackcost.data import DATASETS, stdlib_text

    if DATASETS[dataset].fed != "text":
        return
    vocab = next((i.high for i in workload.inputs if i.kind == "ids"), None) or 0
    if vocab < stdlib_text.MIN_VOCAB:
        raise SpecError(
            f"--dataset {dataset} learns a BPE tokenizer of the model's {vocab} ids, which "
            f"leave no room for merges beside the 256 bytes: give at least "
            f"{stdlib_text.MIN_VOCAB} (e.g. -c vocab_size=2048)"
        )


def check_full_batch(spec: TrainSpec) -> None:
    """A training split smaller than one batch trains on nothing (every epoch drops its
    last partial batch): refused here, not as a failed cell. Known before reading the data
    where --limit bounds the split, or the split is drawn (synthetic)."""
    from stackcost.data.synthetic import DEFAULT_SIZES

    cfg = spec.train
    most = [cfg.limit] if cfg.limit is not None else []
    if cfg.dataset == "synthetic":
        most.append(DEFAULT_SIZES["train"])
    if most and spec.batch_size > min(most):
        kept = f"--limit {cfg.limit} keeps" if min(most) == cfg.limit else f"{cfg.dataset} has"
        raise SpecError(
            f"--batch-size {spec.batch_size} is more than the {min(most)} training samples "
            f"{kept}: no full batch to train on"
        )


def _classes(request: TrainingRequest) -> tuple[int | None, DatasetInfo | None]:
    """The classes asked for (None when not given) and the dataset's info (None when the
    dataset is not given)."""
    from stackcost.data import DATASETS

    if request.dataset is not None and request.dataset not in DATASETS:
        raise SpecError(f"unknown dataset {request.dataset!r} (allowed: {', '.join(DATASETS)})")
    given = request.num_classes
    info = DATASETS[request.dataset] if request.dataset else None
    if given and info and info.num_classes not in (None, given):
        raise SpecError(f"--num-classes {given}: {info.name} has {info.num_classes} classes")
    return given, info


def model_to_train(request: TrainingRequest) -> ModelRef:
    """The ModelRef to ask about (probe.ask) before training it: trained_model completes it.

    Its width is the dataset's class count (10 for synthetic data unless num_classes);
    a Hugging Face model gets its classification head unless the head says otherwise; any
    other's own Workload (a factory's, a zoo model's that is no CNN) says how wide its
    head is, unless num_classes.
    """
    from stackcost.data import DATASETS

    given, info = _classes(request)
    head = _head(request)
    classes = given or (info.num_classes if info else None) or 10

    def ref(num_classes: int | None, in_channels: int | None = None) -> ModelRef:
        return model_ref(
            request.model, num_classes=num_classes, in_channels=in_channels,
            init=request.init, seed=request.seed, config=dict(request.config), head=head,
        )  # fmt: skip

    if trains_text(request):
        return ref(None)
    if _is_zoo_cnn(request.model):
        # A zoo CNN takes the dataset's channels (3 for data sized at load).
        native = (info or DATASETS["digits"]).native_shape
        return ref(classes, native[0] if native else 3)
    # Any other: its own Workload says how wide its head is (trained_model).
    return ref(classes if _is_hf(request.model) else given)


def _head(request: TrainingRequest) -> str | None:
    """The head to train: a causal LM's on text, a Hugging Face model's classification
    head on labelled samples; None for a model that brings its own."""
    hf, lm = _is_hf(request.model), trains_text(request)
    if lm and not hf:
        raise SpecError(
            f"--dataset {TEXT_DATASET} trains a causal language model: {request.model} has "
            "no LM head (train a decoder: llama-tiny, or hf:<type> --head causal-lm)"
        )
    head = request.head or (CAUSAL_LM if lm else "classification" if hf else None)
    if hf and head not in ("classification", CAUSAL_LM):
        raise SpecError(
            f"--head {head}: training needs --head classification (or {CAUSAL_LM}, on text)"
        )
    if hf and (head == CAUSAL_LM) != lm:
        what = f"--dataset {request.dataset}" if request.dataset else "the default dataset"
        raise SpecError(
            f"--head {head} does not train on {what}: a causal LM trains on "
            f"--dataset {TEXT_DATASET} (its next tokens), a classifier on labelled samples"
        )
    return head


def _is_hf(name: str) -> bool:
    from stackcost import zoo

    return name.startswith("hf:") or zoo.is_hf_entry(name)


def _is_zoo_cnn(name: str) -> bool:
    from stackcost import zoo

    return name in zoo.MODELS and zoo.MODELS[name].image_input is not None


def trained_model(
    request: TrainingRequest, model: ModelRef, learned: Mapping[str, dict[str, Any]]
) -> tuple[ModelRef, Workload]:
    """The ModelRef to train and its workload, which must end in a classification head.

    `learned`: the workloads the probe learned (by model name), for a model in user code
    or transformers; a zoo model's is read here.
    """
    from stackcost import zoo

    found = (
        Workload.from_facts(learned[model.name]) if model.needs_probe else zoo.workload_of(model)
    )
    if _is_zoo_cnn(request.model) or _is_hf(request.model):  # sized by model_to_train
        return model, found
    given, info = _classes(request)
    if found.num_classes == 0:
        raise SpecError(
            f"{request.model} has no classification head (its Workload's num_classes is 0): "
            "training needs one"
        )
    if found.image_input and info and info.num_classes not in (None, found.num_classes):
        raise SpecError(
            f"{request.model} has {found.num_classes} classes; {info.name} has {info.num_classes}"
        )
    return model.model_copy(update={"num_classes": given or found.num_classes}), found


def train_sizes(request: TrainingRequest, workload: Workload, info: DatasetInfo) -> dict[str, int]:
    """One value per size axis of the model: the request's, else the model's default; for
    an image model, the smallest resolution it accepts that still holds the dataset's
    images (datasets sized at load, synthetic and VOC, get 32 px)."""
    from stackcost.runspec.train import default_resolution

    for axis, value in request.sizes.items():
        problem = workload.size_problem(axis, value)
        if problem:
            raise SpecError(problem)
    defaults = dict(workload.sizes)
    if workload.domain == "generation":  # a causal LM learns from prompt_len tokens of text
        defaults.pop("new_tokens", None)
    if workload.image_input is not None and "resolution" in defaults:
        native = info.native_shape[-1] if info.native_shape else 32
        defaults["resolution"] = default_resolution(workload, native)
    return {axis: request.sizes.get(axis, default) for axis, default in defaults.items()}
