"""The words of a grid's flags that other layers define, as a spec reads them: the workers'
memory allocators, the scenarios, durations (LoadGen's bounds, a serve sweep's times), serve request
lengths, and the thread count a spec defaults to.

A command's parser shows and checks these through here, so it never reaches into the
machinery that defines them. Every check raises a one-line SpecError, as validation does.
"""

from __future__ import annotations

from stackcost.allocators import ALLOCATORS, DEFAULT_ALLOCATOR, GATE_ALLOCATOR, allocator_problem
from stackcost.env import cores
from stackcost.errors import SpecError
from stackcost.scenarios.settings import (
    MAX_LATENCY_BOUND_MS,
    MAX_MIN_DURATION_MS,
    SCENARIO_CHOICES,
    parse_duration_ms,
)
from stackcost.serving.lengths import parse as parse_lengths

__all__ = [
    "ALLOCATORS",
    "DEFAULT_ALLOCATOR",
    "GATE_ALLOCATOR",
    "SCENARIO_CHOICES",
    "check_allocator",
    "check_lengths_form",
    "default_threads",
    "parse_bound_ms",
    "parse_serve_s",
    "parse_test_duration_ms",
]

# A day: a serve sweep's time per rate and its budget are bounded like LoadGen's durations.
MAX_SERVE_MS = 86_400_000.0


def default_threads() -> int:
    """The threads axis' default: every CPU this process may use."""
    return cores()


def check_allocator(name: str) -> str:
    """`name` when it is a known allocator (ALLOCATORS); SpecError otherwise."""
    if problem := allocator_problem(name):
        raise SpecError(problem)
    return name


def check_lengths_form(form: str) -> str:
    """`form` when it is a serve sweep's request lengths (fixed, uniform:LO-HI or
    file:PATH); SpecError naming the forms otherwise."""
    try:
        parse_lengths(form)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return form


def parse_bound_ms(text: str, what: str) -> float:
    """A p99 latency bound ('50ms', '2s') in ms, at most an hour."""
    return parse_duration_ms(text, what, MAX_LATENCY_BOUND_MS)


def parse_test_duration_ms(text: str, what: str) -> int:
    """LoadGen's minimum test duration ('2s', '500ms') in whole ms, at most a day."""
    return round(parse_duration_ms(text, what, MAX_MIN_DURATION_MS))


def parse_serve_s(text: str, what: str) -> float:
    """A serve sweep's time ('20s', '600s') in seconds, at most a day."""
    return parse_duration_ms(text, what, MAX_SERVE_MS) / 1e3
