"""A rung whose teacher-forced logits are perturbed: the generate scenario must call it
`wrong`, however fast it is."""

from __future__ import annotations

from typing import Any

from stackcost.backends.base import Backend
from stackcost.generation.eager import EagerGenerator


class PerturbedGenerator(EagerGenerator):
    api = "eager with its logits perturbed (a test)"

    def teacher_forced(self, ids: Any, prompt_len: int) -> Any:
        logits = super().teacher_forced(ids, prompt_len)
        return logits * 1.05  # 5% off: far outside fp32's tolerance


class PerturbedBackend(Backend):
    name = "perturbed"
    description = "eager generation with perturbed logits (tests)"
    generator = "tests.generation.perturbed:PerturbedGenerator"

    def prepare(self, model, example, cell, ctx):
        raise NotImplementedError("generate only")
