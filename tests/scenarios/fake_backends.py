"""A backend whose step runs in another program, as a native rung's does."""

from __future__ import annotations

from stackcost.backends.base import Backend


class OutOfProcessBackend(Backend):
    name = "out-of-process"
    description = "no in-process step: prepare raises, as NativeBackend's does"

    def prepare(self, model, example, cell, ctx):
        raise NotImplementedError(f"{self.name} runs out of process: see run_repetition")
