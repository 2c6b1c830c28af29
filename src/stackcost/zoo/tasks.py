"""A checkpoint's task: what its head answers, read from the checkpoint itself.

`save_pretrained` records the class it saved in `config.architectures`
("BertForSequenceClassification", "GPT2LMHeadModel"). transformers' auto mappings list,
per task, the class each model type uses for it; stackcost looks the saved class up in
them, as `AutoModelFor...` and optimum's exporters key on the same task names, never on
the class name's suffix (GPT-2's LM head is `GPT2LMHeadModel`, wav2vec2's audio classifier
`Wav2Vec2ForSequenceClassification`).

Each task says what the model is fed (its modality, and for text whether a decoder's ids
follow) and whether its outputs score the config's `id2label`. A saved class that is the
type's base model is measured as the base model; a head none of these tasks names is
refused with the tasks stackcost feeds.

transformers is imported inside the functions: the CLI imports this module cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from stackcost.zoo.custom import ZooError

Modality = Literal["text", "image", "audio"]


@dataclass(frozen=True)
class Task:
    """One head's task: its name (optimum's), the auto mapping that lists its classes, the
    auto class that builds it, what it is fed, and whether it scores `id2label`."""

    name: str
    mapping: str  # a MODEL_FOR_..._MAPPING_NAMES of transformers.models.auto.modeling_auto
    auto_class: str  # the transformers AutoModelFor... that builds a head of this task
    modality: Modality
    labelled: bool = False  # its logits score the config's id2label (a classifier)


# Searched in this order: a class listed under two tasks is the first one's (audio and image
# classifiers before text's, whose mapping some speech encoders' classes also name).
TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("causal-lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM", "text"),
        Task(
            "seq2seq-lm",
            "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
            "AutoModelForSeq2SeqLM",
            "text",
        ),
        Task(
            "audio-classification",
            "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
            "AutoModelForAudioClassification",
            "audio",
            labelled=True,
        ),
        Task(
            "image-classification",
            "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
            "AutoModelForImageClassification",
            "image",
            labelled=True,
        ),
        Task(
            "sequence-classification",
            "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
            "AutoModelForSequenceClassification",
            "text",
            labelled=True,
        ),
        Task(
            "token-classification",
            "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
            "AutoModelForTokenClassification",
            "text",
            labelled=True,
        ),
        Task(
            "question-answering",
            "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
            "AutoModelForQuestionAnswering",
            "text",
        ),
        Task("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM", "text"),
    )
}
CAUSAL_LM = "causal-lm"
SEQ2SEQ_LM = "seq2seq-lm"


def _classes(names: Any) -> set[str]:
    """Every class a mapping names (a value is one class name or a tuple of them)."""
    out: set[str] = set()
    for value in names.values():
        out.update(value if isinstance(value, (list, tuple)) else (value,))
    return out


def task_of(cfg: Any, where: str) -> Task | None:
    """The task of the head `cfg.architectures` names: None when it names none or the base
    model; ZooError (one line, naming `where`) for a head none of TASKS lists."""
    from transformers.models.auto import modeling_auto

    architectures = getattr(cfg, "architectures", None) or []
    if not architectures:
        return None
    saved = str(architectures[0])
    if saved in _classes(modeling_auto.MODEL_MAPPING_NAMES):
        return None
    for task in TASKS.values():
        if saved in _classes(getattr(modeling_auto, task.mapping)):
            return task
    raise ZooError(
        f"{where}: its head {saved} (config.architectures) is not one stackcost feeds; "
        f"tasks it measures: {', '.join(TASKS)}, or the base model"
    )


def head_class(task: Task, model_type: str) -> Any:
    """The auto class that builds `model_type` with `task`'s head; ZooError when transformers
    has no such head for the type."""
    import transformers
    from transformers.models.auto import modeling_auto

    if model_type not in getattr(modeling_auto, task.mapping):
        raise ZooError(f"hf:{model_type} has no {task.name} head in transformers")
    return getattr(transformers, task.auto_class)
