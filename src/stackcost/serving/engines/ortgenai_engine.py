"""The onnxruntime rung served by onnxruntime-genai's own Engine: it does batch requests
that arrive at different times (0.18's Engine / Request / turn API: requests are added
between engine steps and scheduled together, up to the engine's configured maximum
batch, 4 for the model builder's CPU models here), over the same model the rung's
Generator was verified on.

One engine thread admits arrivals (a Request each, one turn of exactly new_tokens,
greedy), runs engine steps while any is pending, and hands each token event to the
client's event loop as it comes. The engine reports no running or waiting counts.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from stackcost.serving.engine import Engine, EngineDied, Request

DONE = None
EVENTS = 256  # the event buffer's capacity (events per engine step)
IDLE_WAIT_S = 0.05


class OrtGenAIEngine(Engine):
    batching = "dynamic batching (onnxruntime-genai Engine)"
    transport = "in process"

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self._arrivals: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._failure: BaseException | None = None

    async def start(self) -> None:
        import onnxruntime_genai as og

        self._stopping.clear()
        self._failure = None
        self.details = {"runtime": f"onnxruntime-genai {og.__version__}"}
        ready = threading.Event()
        # The Engine is made on its own thread: its operations must come from its owner.
        self._thread = threading.Thread(
            target=self._loop, args=(ready,), daemon=True, name="ort-genai-engine"
        )
        self._thread.start()
        await asyncio.to_thread(ready.wait)
        if self._failure is not None:
            raise RuntimeError(f"onnxruntime-genai Engine: {self._failure}") from self._failure

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
                raise EngineDied(f"the engine failed: {ids}") from ids
            yield ids

    async def stream(self, request: Request) -> AsyncIterator[int]:
        async for ids in self._ids(request):
            yield len(ids)

    async def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        tokens: list[int] = []
        async for ids in self._ids(Request(-1, tuple(prompt), new_tokens)):
            tokens += ids
        return tokens

    def _admit(self, engine: Any, item: Any, active: dict[int, Any]) -> None:
        import onnxruntime_genai as og

        request, out, loop = item
        handle = engine.create_request()
        turn = og.TurnOptions(handle)
        turn.set_do_sample(False)
        turn.set_max_generated_tokens(request.new_tokens)
        turn.set_min_generated_tokens(request.new_tokens)  # EOS masked: exactly new_tokens
        handle.begin_turn(np.asarray(request.prompt, dtype=np.int32), turn)
        active[id(handle)] = (handle, out, loop)

    def _loop(self, ready: threading.Event) -> None:
        import onnxruntime_genai as og

        active: dict[int, Any] = {}
        try:
            try:
                engine = og.Engine(self.model)
                self.details["max_batch_size"] = engine.get_capabilities().configured_max_batch_size
            finally:
                ready.set()
            events = engine.create_event_buffer(EVENTS)
            flag = og.EngineEventFlags
            token, finished, failed = flag.TOKEN.value, flag.TURN_FINISHED.value, flag.FAILED.value
            while not self._stopping.is_set():
                try:
                    item = (
                        self._arrivals.get(timeout=IDLE_WAIT_S)
                        if not active
                        else self._arrivals.get_nowait()
                    )
                except queue.Empty:
                    item = None
                while item is not None:
                    self._admit(engine, item, active)
                    try:
                        item = self._arrivals.get_nowait()
                    except queue.Empty:
                        item = None
                if not active:
                    continue
                for event in engine.run(events):
                    key = id(event.request)
                    if key not in active:
                        continue
                    handle, out, loop = active[key]
                    flags = int(event.flags.value)
                    if flags & failed:
                        loop.call_soon_threadsafe(
                            out.put_nowait, RuntimeError(f"request failed: {event.error_code}")
                        )
                        del active[key]
                        continue
                    if flags & token:
                        loop.call_soon_threadsafe(out.put_nowait, [int(event.token)])
                    if flags & finished:
                        loop.call_soon_threadsafe(out.put_nowait, DONE)
                        handle.close()
                        del active[key]
        except BaseException as exc:  # noqa: BLE001 - every waiting request is told
            self._failure = exc
        finally:
            why = self._failure or RuntimeError("the engine was stopped")
            for _, out, loop in active.values():
                loop.call_soon_threadsafe(out.put_nowait, why)
