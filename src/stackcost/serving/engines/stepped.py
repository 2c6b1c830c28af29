"""An engine stepped by one thread of its own: the runtime is opened on that thread (some
must be driven from the thread that made them), which admits the requests that arrived,
runs one step, and hands each request's new token ids to the client's event loop
(call_soon_threadsafe). A subclass says how to open its runtime, admit a request and step;
this class owns the thread, the hand-off, and telling every waiting request when the
runtime fails or the engine stops.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterable
from typing import Any

from stackcost.serving.engine import Engine, EngineDied, Request

DONE = None  # the end of one request's stream
IDLE_WAIT_S = 0.05  # how long the engine thread waits for work when nothing is running

# What a step reports for one request: its key, its new ids (or why it failed), finished.
Update = tuple[Any, "list[int] | BaseException", bool]


class SteppedEngine(Engine):
    def __init__(self) -> None:
        super().__init__()
        self._arrivals: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._failure: BaseException | None = None

    @abstractmethod
    def open(self) -> Any:
        """Build the runtime, on the engine thread; record what it is in `details`."""

    @abstractmethod
    def admit(self, runtime: Any, request: Request) -> tuple[Any, Any]:
        """Hand `request` to the runtime: (a key its updates carry, its handle)."""

    @abstractmethod
    def step(self, runtime: Any, handles: dict[Any, Any]) -> Iterable[Update]:
        """One runtime step over the admitted requests (key -> handle): each one's news."""

    async def start(self) -> None:
        self._stopping.clear()
        self._failure = None
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), daemon=True, name=type(self).__name__
        )
        self._thread.start()
        await asyncio.to_thread(ready.wait)
        if self._failure is not None:
            raise RuntimeError(f"{self.batching}: {self._failure}") from self._failure

    async def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    async def _ids(self, request: Request) -> AsyncIterator[list[int]]:
        if self._thread is None or not self._thread.is_alive():
            raise EngineDied(f"the engine thread is not running: {self._failure!r}")
        out: asyncio.Queue[Any] = asyncio.Queue()
        self._arrivals.put((request, out, asyncio.get_running_loop()))
        while (ids := await out.get()) is not DONE:
            if isinstance(ids, BaseException):
                raise EngineDied(f"the runtime failed: {ids}") from ids
            yield ids

    async def stream(self, request: Request) -> AsyncIterator[int]:
        async for ids in self._ids(request):
            yield len(ids)

    async def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        tokens: list[int] = []
        async for ids in self._ids(Request(-1, tuple(prompt), new_tokens)):
            tokens += ids
        return tokens

    def _arrived(self, wait: bool) -> Any:
        try:
            return self._arrivals.get(timeout=IDLE_WAIT_S) if wait else self._arrivals.get_nowait()
        except queue.Empty:
            return None

    def _run(self, ready: threading.Event) -> None:
        active: dict[Any, tuple[Any, asyncio.Queue, asyncio.AbstractEventLoop]] = {}
        try:
            try:
                runtime = self.open()
            finally:
                ready.set()
            while not self._stopping.is_set():
                item = self._arrived(wait=not active)
                while item is not None:
                    request, out, loop = item
                    key, handle = self.admit(runtime, request)
                    active[key] = (handle, out, loop)
                    item = self._arrived(wait=False)
                if not active:
                    continue
                handles = {key: handle for key, (handle, _, _) in active.items()}
                for key, news, finished in self.step(runtime, handles):
                    _, out, loop = active[key]
                    if isinstance(news, BaseException):  # this request failed
                        loop.call_soon_threadsafe(out.put_nowait, news)
                        del active[key]
                        continue
                    if news:
                        loop.call_soon_threadsafe(out.put_nowait, news)
                    if finished:
                        loop.call_soon_threadsafe(out.put_nowait, DONE)
                        del active[key]
        except BaseException as exc:  # noqa: BLE001 - every waiting request is told
            self._failure = exc
        finally:  # a request still in flight when the engine stops is told it stopped
            why = self._failure or RuntimeError("the engine was stopped")
            for _, out, loop in active.values():
                loop.call_soon_threadsafe(out.put_nowait, why)
