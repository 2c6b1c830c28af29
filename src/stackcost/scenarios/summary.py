"""LoadGen's own account of a run: mlperf_log_summary.txt (and the peak line of
mlperf_log_detail.txt) read into a ScenarioResult kept with the repetition.

The headline metric is the one MLPerf reports per scenario: SingleStream's p90 latency,
MultiStream's p99 query latency, Server's highest QPS whose p99 stays under the bound,
Offline's samples/s. Every number is LoadGen's: nothing here computes a percentile.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stackcost.result import ScenarioResult
from stackcost.scenarios.settings import KINDS

CONSTRAINTS = (
    "Min duration satisfied",
    "Min queries satisfied",
    "Early stopping satisfied",
    "Performance constraints satisfied",
)
PEAK = re.compile(r"Found peak performance field: ([0-9.eE+-]+)")
NO_START = "Initial lower bound does not satisfy performance constraints"
LINE = re.compile(r"^\s*(?:\*\s*)?([^:]+?)\s*:\s*(.+?)\s*$")


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
    outdir: Path, scenario: str, settings: dict[str, Any], instances: int, tokens: bool = False
) -> ScenarioResult:
    """The ScenarioResult of the LoadGen run that wrote its logs to `outdir`; with `tokens`,
    the headline of a run that served generated tokens (LoadGen's token latencies)."""
    parsed = parse_summary((outdir / "mlperf_log_summary.txt").read_text(errors="replace"))
    kind = KINDS[scenario]
    metric, unit, key = kind.metric, kind.unit, kind.summary_key
    if tokens:
        assert kind.tokens is not None, f"{scenario} does not serve tokens"
        metric, unit, key = kind.tokens
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
