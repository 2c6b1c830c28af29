"""The engine contract: what the load generator drives.

An engine holds one model warm and answers requests that arrive while others are in
flight, batching them as it does (continuous batching, parallel slots) or one at a time.
`stream(request)` yields as output tokens reach the caller: the count of tokens in each
arrival (1 for a token streamed alone; more when a chunk carries several). The client,
not the engine, stamps each arrival, so every engine's latencies mean the same thing:
what a caller of that engine would see.

Generation is greedy and runs exactly `new_tokens` tokens per request (EOS ignored), as
the generate scenario's (generation/metrics.py): an engine that stops early has answered
a shorter request, and the client records it as an error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Request:
    index: int  # its place in the schedule
    prompt: tuple[int, ...]  # token ids
    new_tokens: int


class EngineDied(RuntimeError):
    """The engine stopped answering (its process died, its port closed): the rate in
    progress is a failure with this reason, and the sweep restarts the engine."""


class Engine(ABC):
    # What batches the requests: "continuous batching (transformers
    # ContinuousBatchingManager)", "parallel slots (llama.cpp server)", "one at a time".
    batching: ClassVar[str]
    # Where requests travel: "in process" or "HTTP on loopback (OpenAI-compatible)".
    transport: ClassVar[str]

    def __init__(self) -> None:
        # Recorded with each rate: the engine's version, slots, the options it chose.
        self.details: dict[str, Any] = {}

    @abstractmethod
    async def start(self) -> None:
        """Load, convert and warm the model; return once a request would be answered."""

    @abstractmethod
    async def stop(self) -> None:
        """Release everything start() took (threads, processes, ports)."""

    @abstractmethod
    def stream(self, request: Request) -> AsyncIterator[int]:
        """The request's output as it arrives: token counts, summing to new_tokens."""

    async def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        """The token ids the engine generates for `prompt`: checked against eager fp32's
        greedy tokens before the sweep. An engine that cannot say raises
        NotImplementedError, and the check is recorded as not made."""
        raise NotImplementedError(f"{type(self).__name__} does not return token ids")

    def running(self) -> int | None:
        """Requests the engine is batching now, where it reports it; None otherwise."""
        return None

    def queued(self) -> int | None:
        """Requests waiting inside the engine for a slot, where it reports it."""
        return None
