"""torch.compile (Inductor): transformers' static KV cache with the decode step compiled.

As transformers documents it: `cache_implementation="static"` gives a fixed-shape cache,
and `generate` then compiles the model's forward (its `get_compiled_call`) with the
generation config's CompileConfig; prefill runs the forward as is. transformers compiles
on its own only on accelerators, so the CPU asks for it (`_compile_all_devices`). The
compile happens in the first generation: it is the cell's cold start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stackcost.generation.base import Generation, Generator, OnToken
from stackcost.generation.eager import greedy_config, timed_generate

if TYPE_CHECKING:
    import numpy as np


def compile_config(device: str) -> Any:
    from transformers import CompileConfig

    # reduce-overhead means CUDA graphs: on the CPU there are none, so Inductor's default.
    mode = "reduce-overhead" if device == "cuda" else "default"
    config = CompileConfig(fullgraph=True, dynamic=False, backend="inductor", mode=mode)
    config._compile_all_devices = True  # transformers compiles only on accelerators otherwise
    return config


class InductorGenerator(Generator):
    api = "transformers generate (StaticCache) + torch.compile"
    timing = (
        "streamer callback (transformers' streamer.put, called as each step's tokens are chosen)"
    )

    def prepare(self) -> None:
        import torch
        import transformers

        device = next(self.decoder.model.parameters()).device.type
        self.compile = compile_config(device)
        self.details.update(
            generator=f"transformers {transformers.__version__} generate",
            cache="StaticCache",
            compile={
                "torch": torch.__version__,
                "backend": "inductor",
                "mode": self.compile.mode,
                "fullgraph": True,
                "dynamic": False,
                "what": "the decode forward (generate's get_compiled_call); prefill eager",
            },
        )

    def generate(self, ids: np.ndarray, new_tokens: int, on_token: OnToken = None) -> Generation:
        model = self.decoder.model
        config = greedy_config(
            model, new_tokens, cache_implementation="static", compile_config=self.compile
        )
        return timed_generate(model, ids, config, on_token)

    def teacher_forced(self, ids: np.ndarray, prompt_len: int) -> np.ndarray:
        """Through the same compiled call and a StaticCache: prefill, then one token a step."""
        import numpy as np
        import torch
        from transformers import StaticCache

        model = self.decoder.model
        device = next(model.parameters()).device
        seq = torch.from_numpy(ids).to(device)
        total = seq.shape[1]
        cache = StaticCache(config=model.config, max_cache_len=total)
        forward = model.get_compiled_call(self.compile)
        out = []
        with torch.inference_mode():
            positions = torch.arange(prompt_len, device=device)
            step = model(seq[:, :prompt_len], cache=cache, cache_position=positions, use_cache=True)
            out.append(step.logits[:, -1].float().cpu().numpy())
            for t in range(prompt_len, total):
                position = torch.tensor([t], device=device)
                step = forward(
                    input_ids=seq[:, t : t + 1],
                    cache=cache,
                    cache_position=position,
                    use_cache=True,
                )
                out.append(step.logits[:, -1].float().cpu().numpy())
        return np.stack(out, axis=1)
