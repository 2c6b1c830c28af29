"""Energy of a window of work, labelled measured or estimated, never both.

Measured means a hardware energy counter covered the whole window: the RAPL package
counters (CPU; energy_uj, wrapping at max_energy_range_uj) or NVML's total-energy counter
(GPU, Volta and later). The counter is read at the samples around the window's edges and
interpolated to the edges themselves.

Estimated means no counter did: power comes from a stated model, and the Energy's source
says which model and which constants, so a reader never takes a guess for a reading:

    CPU: P = cores x P_idle + (P_max - P_idle) x busy_cores
         busy_cores is the target's (and its descendants') mean CPU use, in cores; cores
         is how many cores the idle term covers (default: all logical CPUs, as a package
         counter would); P_max = 5.0 W and P_idle = 1.0 W per core are assumptions.
    GPU: the mean of NVML's power readings when the device reports power but has no
         energy counter; else P = P_idle + (P_max - P_idle) x utilisation with the
         device's mean utilization.gpu (assumed 100% without NVML).

A counter present for only part of the window (a zone that stopped reading, a driver
that went away) does not make the result measured: it is estimated, and note says why.

What the two cover differs, and the source says so: RAPL counts the whole package, other
processes included (Telemetry.busy_machine tells whether there were any to speak of);
the CPU estimate counts the target's own CPU time plus the idle term.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel

from stackcost.measure.sampler import bracket, interpolate

Method = Literal["measured", "estimated"]

# Assumed per-core power for the CPU estimate: a loaded modern server core draws a few
# watts (5 W at full use), an idle one in a shallow C-state about a watt. Round numbers
# on purpose: they are an assumption to be replaced by a measurement, not a calibration.
CPU_WATTS_MAX_PER_CORE = 5.0
CPU_WATTS_IDLE_PER_CORE = 1.0
# Assumed GPU board power when NVML gives no power reading: a mid-range data-centre card.
GPU_WATTS_MAX = 300.0
GPU_WATTS_IDLE = 50.0


class PowerModel(BaseModel):
    """The assumption behind an estimate, per unit (a CPU core or a GPU)."""

    unit: Literal["core", "gpu"]
    max_watts: float
    idle_watts: float

    def describe(self) -> str:
        return (
            f"P = P_idle + (P_max - P_idle) x utilisation; P_max = {self.max_watts:g} W "
            f"per busy {self.unit} assumed, P_idle = {self.idle_watts:g} W per {self.unit} "
            "assumed"
        )


# A counter that updates more slowly than the sampler reads it (NVML's total energy: every
# ~10-100 ms) is a measurement of the window only once it has advanced this many times:
# each update is a step of up to 1/MIN_COUNTER_UPDATES of the window, so fewer updates
# leave an error of more than ~10% at the edges. A counter that advanced between every
# two samples (RAPL, ~1 ms) is finer than the sampling and needs no such minimum.
MIN_COUNTER_UPDATES = 10

DEFAULT_CPU_MODEL = PowerModel(
    unit="core", max_watts=CPU_WATTS_MAX_PER_CORE, idle_watts=CPU_WATTS_IDLE_PER_CORE
)
DEFAULT_GPU_MODEL = PowerModel(unit="gpu", max_watts=GPU_WATTS_MAX, idle_watts=GPU_WATTS_IDLE)


class Energy(BaseModel):
    method: Method
    source: str  # the counter read, or the model and its constants
    joules: float
    seconds: float
    watts: float
    samples: int  # inputs processed in the window (batch x iterations)
    joules_per_sample: float
    samples_per_joule: float
    device: str  # "cpu", "cuda:0"
    note: str = ""  # why an estimate when some counter existed


class MixedEnergyMethods(ValueError):
    """Measured and estimated energies are never added up into one unlabelled figure."""


def _make(
    method: Method,
    source: str,
    joules: float,
    seconds: float,
    processed: int,
    device: str,
    note: str = "",
) -> Energy:
    return Energy(
        method=method,
        source=source,
        joules=joules,
        seconds=seconds,
        watts=joules / seconds if seconds > 0 else 0.0,
        samples=processed,
        joules_per_sample=joules / processed,
        samples_per_joule=processed / joules if joules > 0 else 0.0,
        device=device,
        note=note,
    )


def _counter(
    samples: Sequence[Mapping[str, Any]],
    window: tuple[int, int],
    read: Any,
) -> tuple[float | None, str]:
    """Energy over the window from a cumulative counter, or (None, why not).

    read(sample) gives {name: (joules, wrap point in joules)} for each counter the sample
    holds (wrap 0 when the counter does not wrap). The window must lie within the samples, and every sample
    from the one before it to the one after must hold the same counters."""
    start, end = window
    if not samples or samples[0]["t"] > start or samples[-1]["t"] < end:
        return None, "telemetry does not cover the whole window"
    lo, hi = bracket(samples, start, end)
    run = samples[lo : hi + 1]
    readings = [read(s) for s in run]
    names = set().union(*readings)
    if not names:
        return None, "no counter"
    missing = sum(1 for r in readings if set(r) != names)
    if missing:
        return None, (
            f"counter ({', '.join(sorted(names))}) missing in {missing} of {len(run)} "
            "samples in the window: not a measurement of the whole window"
        )
    # Unwrap each counter into a running total, then interpolate to the window's edges.
    totals = [0.0] * len(run)
    for name in names:
        acc = 0.0
        for k in range(1, len(run)):
            value, wrap = readings[k][name]
            prev = readings[k - 1][name][0]
            delta = value - prev
            if delta < 0:
                if not wrap:
                    return None, f"counter {name} went backwards (reset?)"
                delta += wrap  # one wrap per interval at most: sample faster than it wraps
            acc += delta
            totals[k] += acc
    updates = sum(1 for k in range(1, len(run)) if totals[k] > totals[k - 1])
    stale = len(run) - 1 - updates  # sample intervals over which no counter advanced
    ts = [s["t"] for s in run]
    joules = interpolate(ts, totals, end) - interpolate(ts, totals, start)
    if joules <= 0:
        # A live package or GPU always draws something: a flat counter is a stuck one.
        return None, f"counter ({', '.join(sorted(names))}) did not advance over the window"
    if stale and updates < MIN_COUNTER_UPDATES:
        return None, (
            f"counter ({', '.join(sorted(names))}) advanced {updates} times over the "
            f"{(end - start) / 1e6:.0f} ms window, slower than the sampler reads it; a "
            f"measurement needs {MIN_COUNTER_UPDATES} updates (a longer timed loop: --min-time)"
        )
    return joules, ""


def _rapl(sample: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    # Package zones only: psys (platform) would count the package twice, dram is not CPU.
    # Microjoules to joules, the wrap point with them.
    return {
        name: (v[0] / 1e6, v[1] / 1e6)
        for name, v in (sample.get("rapl") or {}).items()
        if name.startswith("package")
    }


def _gpu_row(sample: Mapping[str, Any], index: int) -> Mapping[str, Any] | None:
    for row in sample.get("gpu") or []:
        if row.get("index") == index:
            return row
    return None


def _in_window(samples: Sequence[Mapping[str, Any]], window: tuple[int, int]) -> list:
    lo, hi = bracket(samples, *window)
    return list(samples[lo : hi + 1])


def energy_from_telemetry(
    samples: Sequence[Mapping[str, Any]],
    window: tuple[int, int],
    processed_samples: int,
    device: str = "cpu",
    *,
    cores: float | None = None,
    model: PowerModel | None = None,
    logical_cpus: int | None = None,
    busy_cores: float | None = None,
) -> Energy:
    """Energy of the work done in window = (start_ns, end_ns), CLOCK_MONOTONIC, from the
    sampler's samples (dicts as read_samples returns them).

    device "cpu" reads the RAPL package zones, "cuda:N" GPU N's NVML energy counter; with
    no counter for the whole window the result is estimated with model (default
    DEFAULT_CPU_MODEL / DEFAULT_GPU_MODEL). cores is how many cores the CPU idle term
    covers (default logical_cpus, else the machine's). busy_cores: the target's mean CPU use
    from its own counters (Telemetry with edge counters); else interpolated from samples."""
    if processed_samples <= 0:
        raise ValueError(f"processed_samples must be positive, got {processed_samples}")
    start, end = window
    if end <= start:
        raise ValueError(f"empty window ({start}, {end})")
    seconds = (end - start) / 1e9
    if device == "cpu":
        joules, why = _counter(samples, window, _rapl)
        if joules is not None:
            zones = " + ".join(sorted(_rapl(_in_window(samples, window)[0])))
            # The package counts every process on it, not just the target.
            source = f"RAPL {zones} (whole package)"
            return _make("measured", source, joules, seconds, processed_samples, device)
        return _estimate_cpu(
            samples, window, processed_samples, cores, model, logical_cpus, _why(why), busy_cores
        )
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)

        def energy_mj(s: Mapping[str, Any]) -> dict[str, tuple[float, int]]:
            row = _gpu_row(s, index)
            if row is None or row.get("energy_mj") is None:
                return {}
            return {"nvml": (row["energy_mj"] / 1e3, 0)}

        joules, why = _counter(samples, window, energy_mj)
        if joules is not None:
            source = f"NVML total energy counter (GPU {index})"
            return _make("measured", source, joules, seconds, processed_samples, device)
        return _estimate_gpu(samples, window, processed_samples, device, index, model, _why(why))
    raise ValueError(f"unknown device {device!r} (expected 'cpu' or 'cuda:N')")


def _why(reason: str) -> str:
    # "No counter at all" is the ordinary case for an estimate and needs no note.
    return "" if reason == "no counter" else reason


def _estimate_cpu(
    samples: Sequence[Mapping[str, Any]],
    window: tuple[int, int],
    processed: int,
    cores: float | None,
    model: PowerModel | None,
    logical_cpus: int | None,
    note: str,
    busy: float | None = None,
) -> Energy:
    model = model or DEFAULT_CPU_MODEL
    start, end = window
    origin = "target's CPU time from its own counters"
    if busy is None:
        origin = "target's CPU time from the sampler"
        run = _in_window(samples, window)
        if len(run) < 2:
            raise ValueError("at least two telemetry samples are needed for an estimate")
        ts = [s["t"] for s in run]
        c0, c1 = max(start, ts[0]), min(end, ts[-1])
        cpu = [s["cpu"] for s in run]
        busy = max(interpolate(ts, cpu, c1) - interpolate(ts, cpu, c0), 0.0) * 1e9 / max(c1 - c0, 1)
    if cores is None:
        cores = float(logical_cpus or os.cpu_count() or 1)
    watts = cores * model.idle_watts + (model.max_watts - model.idle_watts) * busy
    seconds = (end - start) / 1e9
    source = f"estimate: {model.describe()}; {busy:.2f} busy cores of {cores:g} ({origin})"
    return _make("estimated", source, watts * seconds, seconds, processed, "cpu", note)


def _estimate_gpu(
    samples: Sequence[Mapping[str, Any]],
    window: tuple[int, int],
    processed: int,
    device: str,
    index: int,
    model: PowerModel | None,
    note: str,
) -> Energy:
    model = model or DEFAULT_GPU_MODEL
    rows = [r for s in _in_window(samples, window) if (r := _gpu_row(s, index)) is not None]
    seconds = (window[1] - window[0]) / 1e9
    power = [r["power_mw"] for r in rows if r.get("power_mw") is not None]
    if power:
        watts = sum(power) / len(power) / 1e3
        source = (
            f"estimate: mean of {len(power)} NVML power readings (GPU {index}) x window "
            "(no energy counter)"
        )
        return _make("estimated", source, watts * seconds, seconds, processed, device, note)
    util = [r["util"] for r in rows if r.get("util") is not None]
    if util:
        u = sum(util) / len(util) / 100
        basis = f"mean NVML utilization.gpu {u:.0%} (GPU {index})"
    else:
        u = 1.0
        basis = "utilisation unknown (no NVML), assumed 100%"
    watts = model.idle_watts + (model.max_watts - model.idle_watts) * u
    source = f"estimate: {model.describe()}; {basis}"
    return _make("estimated", source, watts * seconds, seconds, processed, device, note)


def combine(energies: Sequence[Energy]) -> Energy:
    """One Energy for several windows (e.g. the repetitions of one cell): joules, seconds
    and samples add up. Refuses to mix measured with estimated (MixedEnergyMethods) or
    devices (ValueError): such a total would carry one label for two kinds of number."""
    if not energies:
        raise ValueError("nothing to combine")
    methods = {e.method for e in energies}
    if len(methods) > 1:
        counts = {m: sum(1 for e in energies if e.method == m) for m in sorted(methods)}
        sources = {
            m: sorted({e.source for e in energies if e.method == m}) for m in sorted(methods)
        }
        raise MixedEnergyMethods(
            "cannot combine measured and estimated energy: "
            + "; ".join(f"{counts[m]} {m} ({', '.join(sources[m])})" for m in sorted(methods))
        )
    devices = {e.device for e in energies}
    if len(devices) > 1:
        raise ValueError(f"cannot combine energy of different devices: {sorted(devices)}")
    joules = sum(e.joules for e in energies)
    seconds = sum(e.seconds for e in energies)
    processed = sum(e.samples for e in energies)
    sources = list(dict.fromkeys(e.source for e in energies))
    notes = list(dict.fromkeys(e.note for e in energies if e.note))
    return _make(
        energies[0].method,
        "; ".join(sources),
        joules,
        seconds,
        processed,
        energies[0].device,
        "; ".join(notes),
    )


def fit_power_throughput(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least-squares line through (throughput, watts) points: (slope, intercept, r2).
    Needs two or more points with distinct throughputs."""
    from scipy.stats import linregress  # ~0.5 s of imports: only the report pays for it

    if len(points) < 2:
        raise ValueError("a line needs at least two points")
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    if len(set(xs)) < 2:
        raise ValueError("all points have the same throughput: no line to fit")
    res = linregress(xs, ys)
    return float(res.slope), float(res.intercept), float(res.rvalue**2)
