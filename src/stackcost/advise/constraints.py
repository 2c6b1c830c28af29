"""What the user asks of a deployment: bounds a cell must meet, and what to make best.

A bound on latency is on one call's latency (a batch) at a percentile of the timed loop's
iterations; throughput is samples per second; memory is the worker's peak RSS. A cell's
figures are judged against the bounds with a margin while screening (a short, one-process
measurement may be off by that much) and without one for the finalists."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from stackcost.errors import SpecError

PERCENTILES = ("p50", "p90", "p99")
# What "best" means: the value to make smallest (latency, memory) or largest (throughput).
OBJECTIVES = {"latency": "lower", "throughput": "higher", "memory": "lower"}


@dataclass(frozen=True)
class Constraints:
    """The bounds a recommended cell must meet; None leaves that figure free."""

    # One call's latency at `percentile`; for token generation a call is one decode step,
    # so this bounds TPOT.
    latency_bound_ms: float | None = None
    percentile: str = "p99"
    ttft_bound_ms: float | None = None  # token generation: the median time to first token
    min_throughput: float | None = None  # samples/s
    max_memory_bytes: int | None = None  # peak RSS of the worker
    # Held out, against eager fp32: a classifier's accuracy drop in points, a decoder's
    # perplexity increase in percent (advise.quality).
    max_quality_loss: float | None = None

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise SpecError(
                f"percentile {self.percentile!r} is not one stackcost keeps "
                f"(allowed: {', '.join(PERCENTILES)})"
            )
        for name in ("latency_bound_ms", "ttft_bound_ms", "min_throughput", "max_memory_bytes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise SpecError(f"{name.replace('_', ' ')} {value!r} must be above 0")
        loss = self.max_quality_loss
        if loss is not None and not 0 <= loss < 100:
            raise SpecError(f"max quality loss {loss!r} must be in [0, 100)")

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def words(self, mode: str = "infer") -> str:
        """'p99 ≤ 20 ms, ≥ 100 samples/s, ≤ 1.0 GiB' (or 'no bounds'); for token
        generation 'TPOT p99 ≤ 50 ms, TTFT ≤ 500 ms, ≥ 20 tokens/s'; served under load
        (`serve`, its SLO judged at p99) 'TPOT p99 ≤ 50 ms, TTFT p99 ≤ 500 ms, ≥ 5 req/s
        held'."""
        parts = []
        tokens = mode in ("generate", "serve")
        if self.latency_bound_ms is not None:
            what = f"TPOT {self.percentile}" if tokens else self.percentile
            parts.append(f"{what} ≤ {self.latency_bound_ms:g} ms")
        if self.ttft_bound_ms is not None:
            what = "TTFT p99" if mode == "serve" else "TTFT"
            parts.append(f"{what} ≤ {self.ttft_bound_ms:g} ms")
        if self.min_throughput is not None:
            unit = {"generate": "tokens/s", "serve": "req/s held"}.get(mode, "samples/s")
            parts.append(f"≥ {self.min_throughput:g} {unit}")
        if self.max_memory_bytes is not None:
            parts.append(f"peak RSS ≤ {self.max_memory_bytes / 2**30:.2f} GiB")
        if self.max_quality_loss is not None:
            parts.append(
                f"quality lost ≤ {self.max_quality_loss:g} held out "
                "(accuracy points; a decoder's perplexity %)"
            )
        return ", ".join(parts) or "no bounds"


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise SpecError(
            f"objective {objective!r} is not one advise optimizes "
            f"(allowed: {', '.join(OBJECTIVES)})"
        )
    return objective


def violations(
    latency_ms: float | None,
    throughput: float | None,
    memory_bytes: int | None,
    bounds: Constraints,
    margin: float = 0.0,
    ttft_ms: float | None = None,
) -> list[str]:
    """Each bound these figures break by more than `margin` (a fraction), in words; a
    figure that was not measured breaks no bound here (the caller says it is missing)."""
    out = []
    note = f" ({margin:.0%} margin)" if margin else ""
    slack = 1 + margin
    latency_bound, min_rate, max_memory = (
        bounds.latency_bound_ms,
        bounds.min_throughput,
        bounds.max_memory_bytes,
    )
    if latency_bound is not None and latency_ms is not None and latency_ms > latency_bound * slack:
        out.append(f"{bounds.percentile} {latency_ms:.3g} ms > {latency_bound:g} ms{note}")
    ttft_bound = bounds.ttft_bound_ms
    if ttft_bound is not None and ttft_ms is not None and ttft_ms > ttft_bound * slack:
        out.append(f"TTFT {ttft_ms:.3g} ms > {ttft_bound:g} ms{note}")
    if min_rate is not None and throughput is not None and throughput * slack < min_rate:
        out.append(f"{throughput:.4g} /s < {min_rate:g}{note}")
    if max_memory is not None and memory_bytes is not None and memory_bytes > max_memory * slack:
        out.append(f"peak RSS {memory_bytes / 2**20:.0f} MiB > {max_memory / 2**20:.0f} MiB{note}")
    return out


_UNITS_S = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_UNITS_BYTES = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
MAX_BUDGET_S = 86_400.0


def parse_budget_s(text: str) -> float:
    """'20m', '90s', '1.5h' as seconds, in (0, a day]; the unit is required."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h)\s*", str(text))
    if not match:
        raise SpecError(
            f"--budget {str(text)[:40]!r} is not a duration with a unit (e.g. 20m, 90s, 1h)"
        )
    value = float(match[1]) * _UNITS_S[match[2]]
    if not 0 < value <= MAX_BUDGET_S:
        raise SpecError(f"--budget {text!r} must be above 0 and at most a day")
    return value


def parse_memory_bytes(text: str) -> int:
    """'2GiB', '512MiB', '1.5GB' as bytes (above 0); the unit is required."""
    units = "|".join(_UNITS_BYTES)
    match = re.fullmatch(rf"\s*([0-9]*\.?[0-9]+)\s*({units})\s*", str(text))
    if not match:
        raise SpecError(
            f"--max-memory {str(text)[:40]!r} is not a size with a unit "
            f"(e.g. 2GiB, 512MiB; units: {', '.join(_UNITS_BYTES)})"
        )
    value = int(float(match[1]) * _UNITS_BYTES[match[2]])
    if value <= 0:
        raise SpecError(f"--max-memory {text!r} must be above 0")
    return value
