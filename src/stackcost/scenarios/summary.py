"""LoadGen's own account of a run: mlperf_log_summary.txt (and the peak line of
mlperf_log_detail.txt) read into a ScenarioResult kept with the repetition.

The headline metric is the one MLPerf reports per scenario: SingleStream's p90 latency,
MultiStream's p99 query latency, Server's highest QPS whose p99 stays under the bound,
Offline's samples/s. Every number is LoadGen's: nothing here computes a percentile.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

Verdict = Literal["VALID", "INVALID"]

# scenario -> (headline name, unit, the summary key it comes from; None: the detail log)
HEADLINES: dict[str, tuple[str, str, str | None]] = {
    "single-stream": ("p90 latency", "ms", "90.0th percentile latency (ns)"),
    "multi-stream": ("p99 latency", "ms", "99.0th percentile latency (ns)"),
    "server": ("QPS at bound", "QPS", None),
    "offline": ("throughput", "samples/s", "Samples per second"),
}
CONSTRAINTS = (
    "Min duration satisfied",
    "Min queries satisfied",
    "Early stopping satisfied",
    "Performance constraints satisfied",
)
PEAK = re.compile(r"Found peak performance field: ([0-9.eE+-]+)")
NO_START = "Initial lower bound does not satisfy performance constraints"
LINE = re.compile(r"^\s*(?:\*\s*)?([^:]+?)\s*:\s*(.+?)\s*$")


class ScenarioResult(BaseModel):
    """One repetition's LoadGen run: its verdict, headline and the summary's numbers.

    A LoadGen sample is one call of the prepared step on the cell's batch, so `value` in
    samples/s counts batches; `throughput` of the repetition counts inputs."""

    scenario: str
    verdict: Verdict
    metric: str  # "p90 latency", "p99 latency", "QPS at bound", "throughput"
    unit: str  # "ms", "QPS", "samples/s"
    value: float | None  # None: LoadGen produced no headline (see notes)
    constraints: dict[str, bool] = Field(default_factory=dict)  # "Min duration satisfied"...
    notes: list[str] = Field(default_factory=list)  # LoadGen's recommendations, early stopping
    summary: dict[str, float | str] = Field(default_factory=dict)  # every "key : value" line
    settings: dict[str, Any] = Field(default_factory=dict)  # what LoadGen was told
    instances: int = 1
    errors: int = 0  # LoadGen's own error count ("N ERRORS encountered")

    @property
    def latency_ms(self) -> float | None:
        """The headline when it is a latency (single-stream, multi-stream)."""
        return self.value if self.unit == "ms" else None

    @property
    def rate(self) -> float | None:
        """The headline when it is a rate (server QPS, offline samples/s)."""
        return self.value if self.unit != "ms" else None

    def shown(self) -> str:
        """'2.21 ms p90', '132 QPS at bound', '452 samples/s' ('—' without a value)."""
        if self.value is None:
            return "—"
        number = f"{self.value:.3g}" if self.value < 1000 else f"{self.value:,.0f}"
        tail = (
            f" {self.metric}" if self.unit == "ms" else (" at bound" if self.unit == "QPS" else "")
        )
        return f"{number} {self.unit}{tail}".replace(" latency", "")

    def why_invalid(self) -> str:
        """Which of LoadGen's requirements failed, in its words ('' when VALID)."""
        if self.verdict == "VALID":
            return ""
        failed = [
            name.removesuffix(" satisfied").lower()
            for name, ok in self.constraints.items()
            if not ok
        ]
        why = "; ".join(f"{f} not satisfied" for f in failed) or "see the LoadGen summary"
        return f"LoadGen INVALID: {why}"


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def parse_summary(text: str) -> dict[str, Any]:
    """The summary's `key : value` lines (numbers as floats), the verdict, constraints and
    the bullet notes of its results section."""
    values: dict[str, float | str] = {}
    notes: list[str] = []
    in_results = True
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Additional Stats"):
            in_results = False
        match = LINE.match(line)
        if match:
            values.setdefault(match[1], _number(match[2]))
        if in_results and line.startswith("*"):
            notes.append(line.lstrip("* ").strip())
    errors = re.search(r"(\d+) ERRORS? encountered", text)
    verdict = values.get("Result is")
    return {
        "verdict": verdict if verdict in ("VALID", "INVALID") else "INVALID",
        "constraints": {k: values[k] == "Yes" for k in CONSTRAINTS if k in values},
        "notes": notes,
        "summary": values,
        "errors": int(errors[1]) if errors else 0,
    }


def read_result(
    outdir: Path, scenario: str, settings: dict[str, Any], instances: int
) -> ScenarioResult:
    """The ScenarioResult of the LoadGen run that wrote its logs to `outdir`."""
    parsed = parse_summary((outdir / "mlperf_log_summary.txt").read_text(errors="replace"))
    metric, unit, key = HEADLINES[scenario]
    value: float | None = None
    if key is None:  # server: the peak FindPeakPerformance settled on, from the detail log
        detail = (outdir / "mlperf_log_detail.txt").read_text(errors="replace")
        peak = PEAK.search(detail)
        value = float(peak[1]) if peak else None
        if NO_START in detail:
            parsed["verdict"] = "INVALID"
            parsed["notes"].append(
                f"no QPS met the bound: the search's start "
                f"({settings.get('server_target_qps', 0):.3g} QPS) already broke it"
            )
    else:
        number = parsed["summary"].get(key)
        if isinstance(number, float):
            value = number / 1e6 if unit == "ms" else number
    return ScenarioResult(
        scenario=scenario,
        metric=metric,
        unit=unit,
        value=value,
        settings=settings,
        instances=instances,
        **parsed,
    )
