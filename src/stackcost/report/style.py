"""Shared look of the report and the figures: series colours, axis labels with units."""

from __future__ import annotations

import re
from collections.abc import Iterable

from matplotlib.colors import LinearSegmentedColormap, to_hex

from stackcost.workload import SIZE_AXES

# Okabe-Ito first (colour-blind safe), then tab10 for runs with many backends.
PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#000000",
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)

# The parts of a profiled step's time (profile/breakdown.py), and what the profiler did not see.
PART_COLORS = {
    "graph frames (ops not recorded)": "#CC79A7",
    "kernels": "#0072B2",
    "overhead": "#E69F00",
    "device compute": "#009E73",
    "host<->device copies": "#D55E00",
    "idle": "#CC79A7",
}
REMAINDER_COLOR = "#9e9e9e"

# Every axis and column carries its unit.
AXIS_LABEL = {
    "batch_size": "batch size (samples)",
    # The size axes by name and unit: "resolution (px)", "seq len (tokens)", ...
    **{name: axis.label for name, axis in SIZE_AXES.items()},
    "median_ms": "latency per batch (ms)",
    "throughput_per_s": "throughput (samples/s)",
    "peak_rss_mib": "peak RSS (MiB)",
    "allocator_peak_mib": "device allocator peak (MiB)",
    "cold_start_ms": "cold start: first call (ms)",
    "startup_ms": "startup: prepare + first call (ms)",
    "max_rel_err": "max relative error (unitless)",
    "time_ratio": "time ratio to baseline (×)",
    "cpu_mem_ratio": "CPU memory ratio to baseline (×)",
    "device_mem_ratio": "device memory ratio to baseline (×)",
}

# An axis in running text ("latency vs seq len"), and in file names ("latency_vs_seq_len").
X_NAME = {"batch_size": "batch size", **{n: n.replace("_", " ") for n in SIZE_AXES}}
AXIS_FILE = {"batch_size": "batch", **{n: n for n in SIZE_AXES}}


def series_colors(series: Iterable[str]) -> dict[str, str]:
    """A stable colour per series, in first-seen order, identical in HTML and PNG."""
    out: dict[str, str] = {}
    for name in series:
        if name not in out:
            out[name] = PALETTE[len(out) % len(PALETTE)]
    return out


def slug(text: str) -> str:
    """A file-name-safe version of a model name (user factories contain ':' and '.')."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.") or "model"


# Orange (lowest) to green (highest) per column, as in the inference-framework study.
GRADIENT = LinearSegmentedColormap.from_list("throughput", ["#f6a04d", "#fbe7a3", "#2f9e57"])


def shade(frac: float) -> str:
    """The gradient's background at `frac` (0 worst, 1 best), with a readable text colour."""
    rgb = GRADIENT(frac)[:3]
    luminance = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    return f"background-color:{to_hex(rgb)};color:{'#000' if luminance > 0.55 else '#fff'}"
