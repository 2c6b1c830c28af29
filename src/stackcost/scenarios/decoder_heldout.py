"""Held-out quality of a trained decoder on each generating rung and precision
(`stackcost heldout` on a causal LM trained on stdlib-text).

The checkpoint folder `stackcost train --keep-weights` kept is loaded once, and each rung
converts from it as it does for a generate cell (the ONNX Runtime builder, the OpenVINO
export, the GGUF writer; their quantizers for w8 and w4). The held-out split's blocks of
`prompt_len + 1` tokens are scored as llama.cpp's `llama-perplexity` scores its windows:
the first half is context, and every token of the second half is predicted. The logits
come from each rung's own teacher-forced path (Generator.teacher_forced: the first half
as one prefill, then one cached decode step per token), the path issue 29's verification
checks; the reference is eager fp32's full forward over the same tokens.

Each row: perplexity, its change against eager fp32 in percent, the mean and 99th
percentile KL(eager fp32 || rung) per token, how often the top token is eager's, and the
bytes of weights the rung reads per step. A quantized row is judged by its precision's
rule (axes.QuantRule.max_ppl_increase_pct); fp32 rows must agree with eager fp32 to
rounding (FP32_MAX_PPL_INCREASE_PCT).

The text is finite, so the change in perplexity is stated with its interval: the windows
are the units (the tokens of one window are not independent), the per-window difference of
mean NLL against eager fp32 gets a t interval (two-sided CONFIDENCE, each bound one-sided
95%), and since every window scores as many tokens, exp of that interval is the interval of
the perplexity ratio. A row is `wrong` when the interval lies wholly above its rule,
`undecided` when the observed change exceeds the rule but the interval reaches below it,
`ok` otherwise (the reason naming an interval that still reaches above the rule). Without
two windows no interval is made, and the observed value alone is judged.

`evaluate` scores the training recipe's held-out stdlib-text, or the windows it is given
(scenarios/user_heldout.py: a user's own text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stackcost.axes import QUANTIZED

if TYPE_CHECKING:
    from stackcost.cell import Cell, ModelRef

REFERENCE = ("eager", "fp32")
# A window's first half is context and its second half is scored: 2 tokens at least.
MIN_WINDOW = 2


def window_problem(prompt_len: int) -> str | None:
    """Why windows of `prompt_len` tokens cannot be scored, or None."""
    if prompt_len < MIN_WINDOW:
        return (
            f"--prompt-len {prompt_len}: a held-out window needs at least {MIN_WINDOW} tokens "
            "(its first half is context, its second half is scored)"
        )
    return None


CONFIDENCE = 0.90  # two-sided: each bound of the interval one-sided 95%
# Another rung's fp32 computes the same function: its perplexity within rounding of eager's.
FP32_MAX_PPL_INCREASE_PCT = 0.1


@dataclass(frozen=True)
class DecoderHeldout:
    """One rung and precision on the held-out text. `status`: ok (within its rule), wrong
    (outside it), unsupported (the rung cannot build it), unavailable (its runtime is not
    installed), failed (an exception, in `reason`)."""

    backend: str
    precision: str
    status: str
    reason: str = ""
    tokens: int = 0  # positions scored
    perplexity: float | None = None
    ppl_increase_pct: float | None = None  # against eager fp32's perplexity
    kl_mean: float | None = None  # KL(eager fp32 || this rung), nats per token
    kl_p99: float | None = None
    same_top: float | None = None  # fraction of positions whose top token is eager's
    weight_bytes: int | None = None  # the rung's own weights, as one decode step reads them
    rule: str = ""
    options: dict[str, str] = field(default_factory=dict)  # the rung's -o BACKEND.KEY=VALUE
    windows: int = 0  # the windows scored: the units of the interval
    ppl_increase_low_pct: float | None = None  # the change's interval at CONFIDENCE
    ppl_increase_high_pct: float | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


def windows(cell: Cell) -> tuple[np.ndarray, np.ndarray, int]:
    """The held-out split's token ids (n, prompt_len), the next token at each position
    (n, prompt_len), and the context each window's scoring starts after (half of it)."""
    from stackcost import zoo
    from stackcost.data.splits import text_splits

    test = text_splits(cell, zoo.workload_of(cell.model), ("test",))["test"]
    ids = test.inputs.tensors[test.inputs.names.index("input_ids")].numpy()
    return ids, test.labels.numpy(), ids.shape[1] // 2


def evaluate(
    cell: Cell,
    ref: ModelRef,
    backends: list[str],
    precisions: list[str],
    batch: int,
    workdir: Path,
    on_start: Callable[[str, str], None] | None = None,
    on_row: Callable[[DecoderHeldout], None] | None = None,
    options: dict[str, dict[str, str]] | None = None,
    text: tuple[np.ndarray, np.ndarray, int] | None = None,
) -> list[DecoderHeldout]:
    """Every backend x precision of the decoder kept as the checkpoint folder `ref` names
    (trained by `cell`'s recipe) on the held-out text. Eager fp32 is always scored first:
    the reference. `on_row` gets each asked-for row as soon as it is scored. `options`:
    per backend, the options its rung is built with (-o BACKEND.KEY=VALUE). `text`: the
    windows to score (ids, next tokens, context), instead of the recipe's held-out text."""
    import torch

    from stackcost import zoo
    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.generation.quality import score

    model = zoo.build_model(ref, {})
    digest = zoo.weights_digest(model)
    ids, labels, half = text if text is not None else windows(cell)
    scored = labels[:, half - 1 :]  # the positions teacher_forced returns logits for
    with torch.inference_mode():
        out = model(torch.from_numpy(ids), logits_to_keep=ids.shape[1] - half + 1).logits
    reference = out.float().numpy()
    base = score(reference, scored)
    cache = ArtifactCache(workdir / "artifacts")
    order = [REFERENCE[0], *(b for b in backends if b != REFERENCE[0])]
    rows = []
    for name in order:
        for precision in precisions if name in backends else ["fp32"]:
            if on_start is not None:
                on_start(name, precision)
            rung = (options or {}).get(name, {})
            row = _row(name, precision, cell, ref, model, digest, ids, half, batch, workdir,
                       cache, reference, scored, base.perplexity, rung)  # fmt: skip
            row = replace(row, options=rung)
            if name in backends and precision in precisions:
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return rows


def _row(
    name: str,
    precision: str,
    cell: Cell,
    ref: ModelRef,
    model: Any,
    digest: str,
    ids: np.ndarray,
    half: int,
    batch: int,
    workdir: Path,
    cache: Any,
    reference: np.ndarray,
    scored: np.ndarray,
    fp32_ppl: float,
    options: dict[str, str],
) -> DecoderHeldout:
    from stackcost.backends import load_backend
    from stackcost.backends.base import Unsupported
    from stackcost.cell import Cell
    from stackcost.generation.base import Decoder
    from stackcost.generation.quality import score

    generator_class = load_backend(name).generator_class()
    if generator_class is None:
        return DecoderHeldout(name, precision, "unsupported", f"{name} does not generate")
    if precision not in generator_class.precisions:
        return DecoderHeldout(name, precision, "unsupported", f"{name} has no {precision} path")
    if (missing := generator_class.missing()) is not None:
        return DecoderHeldout(name, precision, "unavailable", missing)
    gen_cell = Cell(
        model=ref,
        backend=name,
        batch_size=batch,
        sizes={"prompt_len": half, "new_tokens": ids.shape[1] - half},
        precision=precision,
        threads=cell.threads,
        backend_options=options,
    )
    home = workdir / f"{name}-{precision}"
    home.mkdir(parents=True, exist_ok=True)
    try:
        generator = generator_class(Decoder(model, gen_cell, home, cache, digest))
        generator.prepare()
        logits = _teacher_forced(generator, ids, half, batch)
        quality = score(logits, scored, reference)
        weight_bytes = generator.weight_bytes()
    except Unsupported as exc:
        return DecoderHeldout(name, precision, "unsupported", str(exc))
    except Exception as exc:  # noqa: BLE001 - a runtime's failure is this row's result
        return DecoderHeldout(name, precision, "failed", f"{type(exc).__name__}: {exc}"[:300])
    increase = (quality.perplexity / fp32_ppl - 1) * 100
    low, high = increase_interval(logits, reference, scored)
    bound = (
        FP32_MAX_PPL_INCREASE_PCT
        if precision == "fp32"
        else QUANTIZED[precision].max_ppl_increase_pct
    )
    rule = "" if bound is None else f"perplexity <= eager fp32's + {bound:g}%"
    status, reason = verdict(increase, low, high, bound, len(ids))
    return DecoderHeldout(
        name,
        precision,
        status,
        reason=reason,
        tokens=quality.tokens,
        perplexity=quality.perplexity,
        ppl_increase_pct=increase,
        kl_mean=quality.kl_mean,
        kl_p99=quality.kl_p99,
        same_top=quality.same_top,
        weight_bytes=weight_bytes,
        rule=rule,
        windows=len(ids),
        ppl_increase_low_pct=low,
        ppl_increase_high_pct=high,
    )


def increase_interval(
    logits: np.ndarray, reference: np.ndarray, labels: np.ndarray
) -> tuple[float | None, float | None]:
    """The interval of the perplexity change against `reference`, in percent, at
    CONFIDENCE: a t interval over the windows' paired differences of mean NLL (the module
    docstring); (None, None) with fewer than two windows."""
    from scipy import stats

    from stackcost.generation.quality import window_nll

    diff = window_nll(logits, labels) - window_nll(reference, labels)
    if len(diff) < 2:
        return None, None
    mean, spread = float(diff.mean()), float(diff.std(ddof=1)) / np.sqrt(len(diff))
    t = float(stats.t.ppf(1 - (1 - CONFIDENCE) / 2, len(diff) - 1))
    return (np.exp(mean - t * spread) - 1) * 100, (np.exp(mean + t * spread) - 1) * 100


def verdict(
    increase: float, low: float | None, high: float | None, bound: float | None, windows: int
) -> tuple[str, str]:
    """(status, reason) of a perplexity change against its rule's `bound` (the module
    docstring); no bound: ok."""
    if bound is None:
        return "ok", ""
    text = f"perplexity {increase:+.2f}%"
    if low is not None and high is not None:
        text += f" [{low:+.2f}, {high:+.2f}]"
    if low is None:
        return ("ok", "") if increase <= bound else ("wrong", f"{text} > +{bound:g}%")
    if low > bound:
        return "wrong", f"{text} > +{bound:g}%"
    if increase > bound:
        return "undecided", f"undecided at {windows} windows: {text} straddles +{bound:g}%"
    if high is not None and high > bound:
        return (
            "ok",
            f"meets its rule as observed; at {windows} windows {text} reaches above +{bound:g}%",
        )
    return "ok", ""


def _teacher_forced(generator: Any, ids: np.ndarray, half: int, batch: int) -> np.ndarray:
    """The rung's logits over every window, `batch` windows a call (the last call padded
    with copies of its first row, their logits dropped)."""
    out = []
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        rows = len(chunk)
        if rows < batch:
            chunk = np.concatenate([chunk, np.repeat(chunk[:1], batch - rows, axis=0)])
        out.append(np.asarray(generator.teacher_forced(chunk, half), dtype=np.float32)[:rows])
    return np.concatenate(out)
