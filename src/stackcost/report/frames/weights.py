"""Which weights a run's cells had, in words for a caption: seeded random weights, or a
checkpoint's own (its files' sha256), so a reader knows whether a quality figure could
mean anything (random weights make near-ties of a model's top scores)."""

from __future__ import annotations

from collections.abc import Iterable

from stackcost.cell import ModelRef


def is_random(model: ModelRef) -> bool:
    """Whether the model's weights were drawn from a seed (not a checkpoint's own)."""
    return not model.checkpoint


def weights_line(model: ModelRef) -> str:
    """'weights of hf:/m/clf: its checkpoint's own (model.safetensors sha256 1a2b3c4d5e6f)',
    or 'weights of resnet18: seeded random (seed 0, torch-default init)'."""
    if model.checkpoint:
        files = ", ".join(
            f"{name} sha256 {digest[:12]}" for name, digest in model.checkpoint["files"].items()
        )
        return f"weights of {model.name}: its checkpoint's own ({files})"
    return f"weights of {model.name}: seeded random (seed {model.seed}, {model.init} init)"


def weights_lines(models: Iterable[ModelRef]) -> list[str]:
    """One line per distinct model, in first-seen order."""
    seen: dict[str, str] = {}
    for model in models:
        seen.setdefault(model.name, weights_line(model))
    return list(seen.values())


def tokens_note(models: Iterable[ModelRef]) -> str:
    """What the greedy-token agreement means for these weights."""
    if all(is_random(m) for m in models):
        return "information only: random weights make near-ties"
    return "information only: a near-tie flips a greedy token without any error"
