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
    """Eager after a 3 s prepare: keeps a repetition in flight long enough to interrupt.

    STACKCOST_TEST_SLOW_S, where a spec passes it on (inherit_env), sets the delay: a
    resume that finishes an interrupted sweep need not wait again."""

    name = "slow-start"
    description = "sleeps 3 s in prepare, then runs eager"
    delay_s = 3.0

    def prepare(self, model, example, cell, ctx):
        time.sleep(float(os.environ.get("STACKCOST_TEST_SLOW_S", self.delay_s)))
        return EagerBackend().prepare(model, example, cell, ctx)


class BriefStartBackend(SlowStartBackend):
    """Eager after a 1 s prepare: in flight for a test that acts within 0.5 s of seeing
    its worker start (a worker spends its import, then this, before it can finish)."""

    name = "brief-start"
    description = "sleeps 1 s in prepare, then runs eager"
    delay_s = 1.0


_LEAKED: list[bytes] = []


class LeakyBackend(Backend):
    """Eager whose step keeps 64 KiB per call alive in a global list: a leak to catch."""

    name = "leaky"
    description = "eager plus 64 KiB retained per step"

    def prepare(self, model, example, cell, ctx):
        inner = EagerBackend().prepare(model, example, cell, ctx).step

        def step():
            _LEAKED.append(os.urandom(64 * 1024))  # random: pages really get touched
            return inner()

        return Prepared(step)


class BusyBackend(Backend):
    """Eager plus a busy-wait of STACKCOST_TEST_BUSY_US microseconds (default 200) per step.

    The backend string, and so the cell key, stays the same whatever the delay: a
    baseline and a slowed-down candidate are the same cell, as a regression would be.
    """

    name = "busy"
    description = "eager plus a fixed busy-wait"

    def prepare(self, model, example, cell, ctx):
        inner = EagerBackend().prepare(model, example, cell, ctx).step
        delay = float(os.environ.get("STACKCOST_TEST_BUSY_US", "200")) / 1e6

        def step():
            end = time.perf_counter() + delay
            while time.perf_counter() < end:
                pass
            return inner()

        return Prepared(step, {"busy_us": delay * 1e6})


class WholeRepetitionBackend(BusyBackend):
    """BusyBackend whose repetition is its own (as a native program's is): it cannot be
    cut into bursts, so ab measures it in whole-process blocks."""

    name = "whole"

    def run_repetition(self, *args, **kwargs):
        return super().run_repetition(*args, **kwargs)


class AllocFailBackend(Backend):
    """Fails as c10's CPU allocator does when a batch does not fit (no real allocation)."""

    name = "alloc-fail"
    description = "raises c10's DefaultCPUAllocator message in prepare at batch >= 4"

    def prepare(self, model, example, cell, ctx):
        if cell.batch_size >= 4:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: can't "
                "allocate memory: you tried to allocate 137438953472 bytes. Error code 12"
            )
        return EagerBackend().prepare(model, example, cell, ctx)


class EnvBackend(Backend):
    """Eager, recording which of a few variables its worker process saw."""

    name = "env"
    description = "eager; details['seen_env'] lists the worker's variables of interest"

    def prepare(self, model, example, cell, ctx):
        prepared = EagerBackend().prepare(model, example, cell, ctx)
        names = ("KMP_AFFINITY", "STACKCOST_TEST_PASSED", "OMP_NUM_THREADS", "PATH")
        prepared.details["seen_env"] = {k: os.environ.get(k) for k in names}
        return prepared
