"""The eager rung served by transformers' own continuous batching: the
ContinuousBatchingManager that `transformers serve` puts behind its OpenAI-compatible
endpoint, here driven in process (checked to run on a CPU, transformers 5.24).

The manager runs the model on a background thread of its own: requests join the running
batch between steps (prefill chunks beside decode steps, a paged KV cache), and each
streamed output is handed to the client's event loop as it is ready (the manager's
register_result_handler, call_soon_threadsafe). Greedy, EOS disabled, exactly
new_tokens per request. The generation thread gets its own OpenMP team, as any second
thread running torch does (scenarios/sut.py says what that costs on 2 cores).

The paged KV cache is sized for the sweep, not for the machine. Left to itself the
manager takes 90% of free memory: about 18 GB here, and 16 s to allocate it and its
attention masks (8192 batch tokens by every cached token), even for a 2-layer model.
It is sized instead to hold the sweep's largest burst at the longest length a request
may reach, as OpenVINO's pipeline is given more cache than its sweep can fill: the
cache never queues a request here, so the engine's batching is what is measured.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import AsyncIterator
from typing import Any

from stackcost.serving.engine import Engine, Request
from stackcost.serving.sweep import MAX_BURST

# Tokens one step may batch (prefill chunks beside decode steps); the attention masks
# scale with it times the cache's tokens. The manager's default is 8192.
MAX_BATCH_TOKENS = 2048
PAGE_TOKENS = 256  # the manager's default page; a shorter request gets a shorter one


def cache_config(context: int) -> dict[str, int]:
    """The paged cache's sizes for requests of at most `context` tokens, MAX_BURST of
    them at once: a page fits one request where it can (at least 16 tokens)."""
    page = min(PAGE_TOKENS, max(16, 1 << (context - 1).bit_length()))
    blocks = MAX_BURST * math.ceil(context / page)
    return {"page_size": page, "num_blocks": blocks, "max_batch_tokens": MAX_BATCH_TOKENS}


class TransformersEngine(Engine):
    batching = "continuous batching (transformers ContinuousBatchingManager)"
    transport = "in process"

    def __init__(self, model: Any, max_new_tokens: int, context: int) -> None:
        super().__init__()
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.cache = cache_config(context)
        self.manager: Any = None
        self._ids = itertools.count()

    async def start(self) -> None:
        import transformers
        from transformers import ContinuousBatchingConfig, GenerationConfig

        config = GenerationConfig(
            do_sample=False, max_new_tokens=self.max_new_tokens, eos_token_id=-1, pad_token_id=0
        )
        self.manager = self.model.init_continuous_batching(
            generation_config=config,
            continuous_batching_config=ContinuousBatchingConfig(**self.cache),
        )
        self.manager.start()
        self.details = {
            "transformers": transformers.__version__,
            "attention": getattr(self.model.config, "_attn_implementation", None),
            "kv_cache": {
                **self.cache,
                "tokens": self.cache["page_size"] * self.cache["num_blocks"],
            },
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
