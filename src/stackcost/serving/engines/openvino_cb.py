"""The openvino rung served by OpenVINO GenAI's continuous batching: a
ContinuousBatchingPipeline over the same stateful IR the rung's LLMPipeline was verified
on (the pipeline rewrites its attention to paged attention itself).

The pipeline is stepped by one engine thread: each step first admits the requests that
arrived, runs one scheduler step (prefill chunks beside decode steps), then hands every
request's new token ids to the client's event loop. The thread records how many requests
were running and waiting after each step (the pipeline's own metrics). Greedy, EOS
ignored, exactly new_tokens per request; f32 inference and KV cache, the rung's threads.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from stackcost.serving.engine import Engine, EngineDied, Request

DONE = None
# The KV cache the scheduler may allocate, in GB: far beyond a small model's sweep here.
CACHE_GB = 2
IDLE_WAIT_S = 0.05  # how long the engine thread sleeps for work when nothing is running


class OpenVINOEngine(Engine):
    batching = "continuous batching (OpenVINO GenAI ContinuousBatchingPipeline)"
    transport = "in process"

    def __init__(self, model_dir: Path, properties: dict[str, Any]) -> None:
        super().__init__()
        self.model_dir = model_dir
        # LLMPipeline's own knobs (a latency hint, SDPA) are not the batching pipeline's.
        self.properties = {
            k: v
            for k, v in properties.items()
            if k not in ("PERFORMANCE_HINT", "ATTENTION_BACKEND")
        }
        self._arrivals: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._failure: BaseException | None = None
        self._running = 0
        self._waiting = 0

    async def start(self) -> None:
        import openvino as ov
        import openvino_genai as og

        scheduler = og.SchedulerConfig()
        scheduler.cache_size = CACHE_GB
        pipeline = og.ContinuousBatchingPipeline(
            str(self.model_dir), scheduler, "CPU", self.properties
        )
        self.details = {
            "runtime": f"openvino-genai {og.__version__}, openvino {ov.get_version()}",
            "model": str(self.model_dir),
            "properties": self.properties,
            "kv_cache_gb": CACHE_GB,
        }
        self._stopping.clear()
        self._failure = None
        self._thread = threading.Thread(
            target=self._loop, args=(pipeline,), daemon=True, name="openvino-cb"
        )
        self._thread.start()

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
                raise EngineDied(f"the pipeline failed: {ids}") from ids
            yield ids

    async def stream(self, request: Request) -> AsyncIterator[int]:
        async for ids in self._ids(request):
            yield len(ids)

    async def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        tokens: list[int] = []
        async for ids in self._ids(Request(-1, tuple(prompt), new_tokens)):
            tokens += ids
        return tokens

    def running(self) -> int:
        return self._running

    def queued(self) -> int:
        return self._waiting + self._arrivals.qsize()

    def _loop(self, pipeline: Any) -> None:
        import numpy as np
        import openvino as ov
        import openvino_genai as og

        active: dict[int, tuple[Any, asyncio.Queue, asyncio.AbstractEventLoop]] = {}
        ids = 0
        try:
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
                    request, out, loop = item
                    config = og.GenerationConfig()
                    config.max_new_tokens = config.min_new_tokens = request.new_tokens
                    config.ignore_eos, config.do_sample = True, False
                    prompt = ov.Tensor(np.asarray([request.prompt], dtype=np.int64))
                    active[ids] = (pipeline.add_request(ids, prompt, config), out, loop)
                    ids += 1
                    try:
                        item = self._arrivals.get_nowait()
                    except queue.Empty:
                        item = None
                if not active:
                    continue
                pipeline.step()
                metrics = pipeline.get_metrics()
                self._running = metrics.scheduled_requests
                self._waiting = max(0, metrics.requests - metrics.scheduled_requests)
                for key in list(active):
                    handle, out, loop = active[key]
                    if handle.can_read():
                        new = [t for o in handle.read().values() for t in o.generated_ids]
                        if new:
                            loop.call_soon_threadsafe(out.put_nowait, new)
                    if handle.get_status() != og.GenerationStatus.RUNNING:  # finished, or not
                        loop.call_soon_threadsafe(out.put_nowait, DONE)
                        del active[key]
        except BaseException as exc:  # noqa: BLE001 - every waiting request is told
            self._failure = exc
        finally:  # a request still in flight when the engine stops is told it stopped
            why = self._failure or RuntimeError("the engine was stopped")
            for _, out, loop in active.values():
                loop.call_soon_threadsafe(out.put_nowait, why)
