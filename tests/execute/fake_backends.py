"""Deliberately broken backends, loaded by workers through 'module:Class' paths."""

from __future__ import annotations

import os
import time

from stackcost.backends.base import Backend, Prepared
from stackcost.backends.eager import EagerBackend


class AbortBackend(Backend):
    name = "abort"
    description = "calls os.abort() in prepare"

    def prepare(self, model, example, cell, ctx):
        os.abort()


class HangBackend(Backend):
    name = "hang"
    description = "never returns from prepare"

    def prepare(self, model, example, cell, ctx):
        while True:
            time.sleep(1)


class RaiseBackend(Backend):
    name = "raise"
    description = "raises inside the step"

    def prepare(self, model, example, cell, ctx):
        def step():
            raise RuntimeError("kernel not implemented for this shape")

        return Prepared(step)


class WrongBackend(Backend):
    name = "wrong"
    description = "eager plus a 1% offset: fast, maybe, but wrong"

    def prepare(self, model, example, cell, ctx):
        inner = EagerBackend().prepare(model, example, cell, ctx).step

        def step():
            out = inner()
            return out + 0.01 * out.abs().max()

        return Prepared(step, {"offset": "1% of max"})


class SlowStartBackend(Backend):
    """Eager after a 3 s prepare: keeps a repetition in flight long enough to interrupt."""

    name = "slow-start"
    description = "sleeps 3 s in prepare, then runs eager"

    def prepare(self, model, example, cell, ctx):
        time.sleep(3)
        return EagerBackend().prepare(model, example, cell, ctx)
