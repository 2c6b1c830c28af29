"""The eager rung served by transformers' own continuous batching: the
ContinuousBatchingManager that `transformers serve` puts behind its OpenAI-compatible
endpoint, here driven in process (checked to run on a CPU, transformers 5.24).

The manager runs the model on a background thread of its own: requests join the running
batch between steps (prefill chunks beside decode steps, a paged KV cache), and each
streamed output is handed to the client's event loop as it is ready (the manager's
register_result_handler, call_soon_threadsafe). Greedy, EOS disabled, exactly
new_tokens per request. The generation thread gets its own OpenMP team, as any second
thread running torch does (scenarios/sut.py says what that costs on 2 cores).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

from stackcost.serving.engine import Engine, Request


class TransformersEngine(Engine):
    batching = "continuous batching (transformers ContinuousBatchingManager)"
    transport = "in process"

    def __init__(self, model: Any, max_new_tokens: int) -> None:
        super().__init__()
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.manager: Any = None
        self._ids = itertools.count()

    async def start(self) -> None:
        import transformers
        from transformers import GenerationConfig

        config = GenerationConfig(
            do_sample=False, max_new_tokens=self.max_new_tokens, eos_token_id=-1, pad_token_id=0
        )
        self.manager = self.model.init_continuous_batching(generation_config=config)
        self.manager.start()
        self.details = {
            "transformers": transformers.__version__,
            "attention": getattr(self.model.config, "_attn_implementation", None),
        }

    async def stop(self) -> None:
        if self.manager is not None:
            await asyncio.to_thread(self.manager.stop, block=True)
            self.manager = None

    async def stream(self, request: Request) -> AsyncIterator[int]:
        outputs: asyncio.Queue[Any] = asyncio.Queue()
        request_id = f"r{request.index}-{next(self._ids)}"
        # The handler first: a result that came before it would go to the shared queue.
        self.manager.register_result_handler(request_id, outputs.put_nowait)
        added = self.manager.add_request(
            list(request.prompt), request_id=request_id,
            max_new_tokens=request.new_tokens, streaming=True, eos_token_id=-1,
        )  # fmt: skip
        if added is None:
            raise RuntimeError("the continuous batching manager refused the request")
        seen = 0
        while True:
            out = await outputs.get()
            if out.error is not None:
                raise RuntimeError(f"continuous batching: {out.error}")
            fresh = len(out.generated_tokens) - seen
            if fresh > 0:
                seen += fresh
                yield fresh
            if out.is_finished():
                return

    def _scheduler(self) -> Any:
        processor = getattr(self.manager, "batch_processor", None)
        return getattr(processor, "scheduler", None)

    def running(self) -> int | None:
        scheduler = self._scheduler()
        return None if scheduler is None else len(scheduler.active_requests)

    def queued(self) -> int | None:
        scheduler = self._scheduler()
        return None if scheduler is None else len(scheduler.waiting_requests)

    async def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        request_id = f"check-{next(self._ids)}"
        outputs: asyncio.Queue[Any] = asyncio.Queue()
        self.manager.register_result_handler(request_id, outputs.put_nowait)
        self.manager.add_request(
            prompt, request_id=request_id, max_new_tokens=new_tokens, eos_token_id=-1
        )
        while not (out := await outputs.get()).is_finished():
            pass
        if out.error is not None:
            raise RuntimeError(f"continuous batching: {out.error}")
        return list(out.generated_tokens)
