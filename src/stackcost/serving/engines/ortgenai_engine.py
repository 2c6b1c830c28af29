"""The onnxruntime rung served by onnxruntime-genai's own Engine: it does batch requests
that arrive at different times (0.18's Engine / Request / turn API: requests are added
between engine steps and scheduled together, up to the engine's configured maximum
batch, 4 for the model builder's CPU models here), over the same model the rung's
Generator was verified on.

Stepped by one engine thread (stepped.py), which is also where the Engine is made: its
operations must come from the thread that owns it. Each request is a Request with one
turn of exactly new_tokens, greedy. The engine reports no running or waiting counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from stackcost.serving.engine import Request
from stackcost.serving.engines.stepped import SteppedEngine, Update

EVENTS = 256  # the event buffer's capacity (events per engine step)


class OrtGenAIEngine(SteppedEngine):
    batching = "dynamic batching (onnxruntime-genai Engine)"
    transport = "in process"

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def open(self) -> Any:
        import onnxruntime_genai as og

        engine = og.Engine(self.model)
        self.details = {
            "runtime": f"onnxruntime-genai {og.__version__}",
            "max_batch_size": engine.get_capabilities().configured_max_batch_size,
        }
        return engine, engine.create_event_buffer(EVENTS)

    def admit(self, runtime: Any, request: Request) -> tuple[Any, Any]:
        import onnxruntime_genai as og

        engine, _ = runtime
        handle = engine.create_request()
        turn = og.TurnOptions(handle)
        turn.set_do_sample(False)
        turn.set_max_generated_tokens(request.new_tokens)
        turn.set_min_generated_tokens(request.new_tokens)  # EOS masked: exactly new_tokens
        handle.begin_turn(np.asarray(request.prompt, dtype=np.int32), turn)
        return id(handle), handle

    def step(self, runtime: Any, handles: dict[Any, Any]) -> Iterable[Update]:
        import onnxruntime_genai as og

        engine, events = runtime
        flag = og.EngineEventFlags
        token, finished, failed = flag.TOKEN.value, flag.TURN_FINISHED.value, flag.FAILED.value
        for event in engine.run(events):
            key = id(event.request)
            if key not in handles:
                continue
            flags = int(event.flags.value)
            if flags & failed:
                yield key, RuntimeError(f"request failed: {event.error_code}"), True
                continue
            done = bool(flags & finished)
            if done:
                handles[key].close()
            yield key, [int(event.token)] if flags & token else [], done
