"""PyTorch eager: transformers' own `generate`, greedy, with its DynamicCache."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from stackcost.generation.base import Generation, Generator, OnToken

if TYPE_CHECKING:
    import numpy as np


class TokenClock:
    """A transformers streamer that reads the clock as each new token is handed to it.

    `generate` puts the prompt first (before prefill), then each step's tokens once they
    are chosen: on the CPU the step is done by then; on CUDA the clock waits for the device."""

    def __init__(self, device: str, on_token: OnToken = None) -> None:
        self.device = device
        self.on_token = on_token
        self.prompt_seen = False
        self.token_ns: list[int] = []

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
        self.token_ns.append(time.perf_counter_ns())
        if self.on_token is not None:
            self.on_token(len(self.token_ns) - 1)

    def end(self) -> None:
        pass


def greedy_config(model: Any, new_tokens: int, **extra: Any) -> Any:
    """Exactly `new_tokens` greedy tokens: EOS ignored (None), so min = max."""
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        num_beams=1,
        eos_token_id=None,
        pad_token_id=0,
        use_cache=True,
        **extra,
    )


def timed_generate(model: Any, ids: np.ndarray, config: Any, on_token: OnToken) -> Generation:
    """transformers' `generate` under `config`, each token's clock read by its streamer."""
    import torch

    device = next(model.parameters()).device
    inputs = torch.from_numpy(ids).to(device)
    clock = TokenClock(device.type, on_token)
    with torch.inference_mode():
        start = time.perf_counter_ns()
        out = model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            generation_config=config,
            streamer=clock,
        )
    return Generation(out[:, ids.shape[1] :].cpu().numpy(), start, clock.token_ns)


def cached_logits(model: Any, ids: np.ndarray, prompt_len: int, **cache: Any) -> np.ndarray:
    """Teacher forcing through a transformers model's cache: the prompt as one forward, then
    one token per forward with the cache the model returned (or `cache` given)."""
    import numpy as np
    import torch

    device = next(model.parameters()).device
    seq = torch.from_numpy(ids).to(device)
    out = []
    with torch.inference_mode():
        step = model(seq[:, :prompt_len], use_cache=True, **cache)
        out.append(step.logits[:, -1].float().cpu().numpy())
        past = step.past_key_values
        for t in range(prompt_len, seq.shape[1]):
            step = model(seq[:, t : t + 1], cache=past, use_cache=True)
            out.append(step.logits[:, -1].float().cpu().numpy())
            past = step.past_key_values
    return np.stack(out, axis=1)


# Weight-only (and dynamic int8) through torchao's quantize_, as the eager rung's forward
# has them (stackcost.quantize.pytorch): nn.Linear layers only, the embedding stays fp32.
QUANTIZE_PATHS = {"w8": "quantize_", "w4": "quantize_", "int8-dyn": "quantize_"}


class EagerGenerator(Generator):
    api = "transformers generate (DynamicCache)"
    timing = (
        "streamer callback (transformers' streamer.put, called as each step's tokens are chosen)"
    )
    precisions = frozenset({"fp32", *QUANTIZE_PATHS})
    # Test-only, as Backend.quantize_scale_error: every weight scale multiplied after
    # quantizing, a broken quantization the held-out rule must call wrong.
    quantize_scale_error: ClassVar[float] = 1.0
    _weight_bytes: int | None = None

    def prepare(self) -> None:
        import transformers

        self.details.update(
            generator=f"transformers {transformers.__version__} generate",
            cache="DynamicCache",
        )
        precision = self.decoder.cell.precision
        if precision in QUANTIZE_PATHS:
            from stackcost.quantize.pytorch import quantize

            # Generation reads self.decoder.model: the quantized copy replaces it here.
            model, record = quantize(
                self.decoder.model, None, precision, QUANTIZE_PATHS[precision], None,
                self.quantize_scale_error,
            )  # fmt: skip
            self.decoder.model = model
            self._weight_bytes = record.weight_bytes
            self.details["quantization"] = record.details()

    def weight_bytes(self) -> int:
        """torchao's tensors report their sizes as fp32's: its record's count when quantized."""
        return self._weight_bytes if self._weight_bytes is not None else super().weight_bytes()

    def generate(self, ids: np.ndarray, new_tokens: int, on_token: OnToken = None) -> Generation:
        model = self.decoder.model
        return timed_generate(model, ids, greedy_config(model, new_tokens), on_token)

    def teacher_forced(self, ids: np.ndarray, prompt_len: int) -> np.ndarray:
        return cached_logits(self.decoder.model, ids, prompt_len)
