"""The openvino rung served by OpenVINO GenAI's continuous batching: a
ContinuousBatchingPipeline over the same stateful IR the rung's LLMPipeline was verified
on (the pipeline rewrites its attention to paged attention itself).

Stepped by one engine thread (stepped.py): each step admits the requests that arrived,
runs one scheduler step (prefill chunks beside decode steps) and hands every request's
new token ids on. After each step the thread records how many requests were running and
waiting (the pipeline's own metrics). Greedy, EOS ignored, exactly new_tokens per request;
f32 inference and KV cache, the rung's threads.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stackcost.serving.engine import Request
from stackcost.serving.engines.stepped import SteppedEngine, Update

# The KV cache the scheduler may allocate, in GB: far beyond a small model's sweep here.
CACHE_GB = 2


class OpenVINOEngine(SteppedEngine):
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
        self._ids_made = itertools.count()
        self._running = 0
        self._waiting = 0

    def open(self) -> Any:
        import openvino as ov
        import openvino_genai as og

        scheduler = og.SchedulerConfig()
        scheduler.cache_size = CACHE_GB
        self.details = {
            "runtime": f"openvino-genai {og.__version__}, openvino {ov.get_version()}",
            "model": str(self.model_dir),
            "properties": self.properties,
            "kv_cache_gb": CACHE_GB,
        }
        return og.ContinuousBatchingPipeline(str(self.model_dir), scheduler, "CPU", self.properties)

    def admit(self, runtime: Any, request: Request) -> tuple[Any, Any]:
        import numpy as np
        import openvino as ov
        import openvino_genai as og

        config = og.GenerationConfig()
        config.max_new_tokens = config.min_new_tokens = request.new_tokens
        config.ignore_eos, config.do_sample = True, False
        key = next(self._ids_made)
        prompt = ov.Tensor(np.asarray([request.prompt], dtype=np.int64))
        return key, runtime.add_request(key, prompt, config)

    def step(self, runtime: Any, handles: dict[Any, Any]) -> Iterable[Update]:
        import openvino_genai as og

        runtime.step()
        metrics = runtime.get_metrics()
        self._running = metrics.scheduled_requests
        self._waiting = max(0, metrics.requests - metrics.scheduled_requests)
        for key, handle in handles.items():
            new = []
            if handle.can_read():
                new = [t for o in handle.read().values() for t in o.generated_ids]
            yield key, new, handle.get_status() != og.GenerationStatus.RUNNING

    def running(self) -> int:
        return self._running

    def queued(self) -> int:
        return self._waiting + self._arrivals.qsize()
