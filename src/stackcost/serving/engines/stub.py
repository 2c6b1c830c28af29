"""An engine with a known service time, to check the load generator against queueing
theory (benchmarks/serve_client.py) and to test the sweep without a model.

`slots` worker threads take requests first come, first served. A request holds its slot
for `prefill_s + new_tokens x tpot_s`: its first token is emitted `prefill_s` after it
got the slot, then one every `tpot_s`, each at its deadline from the slot's start (so
sleep overshoot does not add up). With one slot and Poisson arrivals it is an M/D/1
queue. Tokens are handed to the client's event loop as a threaded engine's would be
(call_soon_threadsafe), and the engine stamps when it emitted each, so the client's
delivery delay can be measured against it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator

from stackcost.serving.engine import Engine, Request

DONE = None  # the end of one request's stream


class StubEngine(Engine):
    batching = "slots, first come first served (stub: a fixed service time)"
    transport = "in process (threads)"

    def __init__(self, slots: int = 1, prefill_s: float = 0.01, tpot_s: float = 0.002) -> None:
        super().__init__()
        if slots < 1 or prefill_s < 0 or tpot_s < 0:
            raise ValueError("a stub needs at least one slot and non-negative times")
        self.slots, self.prefill_s, self.tpot_s = slots, prefill_s, tpot_s
        self.details = {"slots": slots, "prefill_s": prefill_s, "tpot_s": tpot_s}
        self._work: queue.SimpleQueue[
            tuple[Request, asyncio.Queue, asyncio.AbstractEventLoop] | None
        ]
        self._work = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._lock = threading.Lock()  # _busy is counted by every slot's thread
        # What the engine saw, by request index: when it got a slot, and each emission.
        self.began_ns: dict[int, int] = {}
        self.emitted_ns: dict[int, list[int]] = {}

    def service_s(self, new_tokens: int) -> float:
        """How long a request of `new_tokens` holds its slot."""
        return self.prefill_s + (new_tokens - 1) * self.tpot_s

    async def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._serve, daemon=True, name=f"stub-{i}")
            for i in range(self.slots)
        ]
        for t in self._threads:
            t.start()

    async def stop(self) -> None:
        for _ in self._threads:
            self._work.put(DONE)
        for t in self._threads:
            await asyncio.to_thread(t.join)
        self._threads = []

    async def stream(self, request: Request) -> AsyncIterator[int]:
        tokens: asyncio.Queue[int | None] = asyncio.Queue()
        self._work.put((request, tokens, asyncio.get_running_loop()))
        while (count := await tokens.get()) is not DONE:
            yield count

    def running(self) -> int:
        return self._busy

    def queued(self) -> int:
        return self._work.qsize()

    def _serve(self) -> None:
        while (item := self._work.get()) is not DONE:
            request, tokens, loop = item
            with self._lock:
                self._busy += 1
            began = time.perf_counter_ns()
            self.began_ns[request.index] = began
            stamps = self.emitted_ns.setdefault(request.index, [])
            for i in range(request.new_tokens):
                deadline = began + int((self.prefill_s + i * self.tpot_s) * 1e9)
                wait = (deadline - time.perf_counter_ns()) / 1e9
                if wait > 0:
                    time.sleep(wait)
                stamps.append(time.perf_counter_ns())
                loop.call_soon_threadsafe(tokens.put_nowait, 1)
            with self._lock:
                self._busy -= 1
            loop.call_soon_threadsafe(tokens.put_nowait, DONE)
