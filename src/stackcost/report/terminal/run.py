"""The terminal table that ends `stackcost run`: the timed loop's cells and LoadGen's
scenario cells, workload by workload. Its size columns (size_axes, size_heading,
size_value) head the generate and profile tables too."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from rich.table import Table
from rich.text import Text

from stackcost.backends import BASELINE
from stackcost.cell import Cell
from stackcost.execute.plan import CHEAPEST_S
from stackcost.report.fit import FitTable
from stackcost.report.frames import quant
from stackcost.report.frames.scenarios import CAPTION as SCENARIO_CAPTION
from stackcost.report.frames.scenarios import TIMED_LOOP_LABEL, scenario_view
from stackcost.report.frames.weights import weights_lines
from stackcost.report.marks import (
    DISTURBED_MARK,
    DISTURBED_NOTE,
    SPREAD,
    SPREAD_NOTE,
    cell_reason,
    ratio_note,
    ratio_text,
    shown_median_of,
    shown_timing,
    status_text,
)
from stackcost.report.units import mib, ms, rate, sci
from stackcost.store.runs import CellResult, RunResult
from stackcost.workload import SIZE_AXES

WORKLOAD = ("backend", "scenario")  # a row's group for ordering: the workload alone
# What a narrow terminal hides first (report/fit.py): the row's identity, its latency and
# ratio stay; memory last.
DROP = (
    SPREAD,
    "startup",
    "first call",
    "reps",
    "KL",
    "top-1 agree",
    "rel err",
    "weights",
    "throughput",
    "peak RSS (Δ)",
)


class Ratio(NamedTuple):
    value: float
    base_status: str  # the baseline cell's status: the ratio is trusted only when "ok"


def _group_key(c: CellResult, leave_out: tuple[str, ...] = ("backend",)) -> tuple:
    """The workload and placement: everything but the backend (and `leave_out`'s others:
    the scenario too, to order rows by the scenarios' given order instead of by name)."""
    return tuple(v for k, v in c.cell.flat().items() if k not in leave_out)


def _scenario_label(c: CellResult) -> str:
    return c.cell.scenario.label() if c.cell.scenario else TIMED_LOOP_LABEL


def speedups(cells: list[CellResult], baseline: str = BASELINE) -> dict[int, Ratio]:
    """Baseline median / cell median within each workload group, valid cells on both sides.

    A trusted baseline is preferred where a group has several; the ratio carries its
    baseline's status, so a view can mark one taken over an unstable baseline.
    """
    base: dict[tuple, CellResult] = {}
    for c in cells:
        if c.cell.backend == baseline and c.valid and _speed(c):
            held = base.get(_group_key(c))
            if held is None or (c.trusted and not held.trusted):
                base[_group_key(c)] = c
    out = {}
    for i, c in enumerate(cells):
        speed, b = _speed(c), base.get(_group_key(c))
        if c.valid and speed and b is not None and (held := _speed(b)):
            out[i] = Ratio(speed / held, b.status)
    return out


def fp32_speedups(cells: list[CellResult]) -> dict[int, Ratio]:
    """A quantized cell's speed over the same rung's fp32 cell (same options, workload and
    placement; every axis but the precision): above 1 faster, below 1 slower. Valid cells
    on both sides; the ratio carries the fp32 cell's status, as speedups' do."""

    def key(c: CellResult) -> tuple:
        flat = {k: v for k, v in c.cell.flat().items() if k != "precision"}
        return (tuple(flat.items()), tuple(sorted(c.cell.backend_options.items())))

    fp32: dict[tuple, CellResult] = {}
    for c in cells:
        if c.cell.precision == "fp32" and c.valid and _speed(c):
            held = fp32.get(key(c))
            if held is None or (c.trusted and not held.trusted):
                fp32[key(c)] = c
    out = {}
    for i, c in enumerate(cells):
        if not quant.is_quantized(c.cell.precision):
            continue
        speed, f = _speed(c), fp32.get(key(c))
        if c.valid and speed and f is not None and (held := _speed(f)):
            out[i] = Ratio(speed / held, f.status)
    return out


def _quant_columns(c: CellResult, ratio: Ratio | None) -> list[Text]:
    """vs fp32, weights, top-1 and KL of a quantized cell; '—' for a float one. A slower
    cell's speedup is red: it is a result, not noise to average away."""
    if not quant.is_quantized(c.cell.precision):
        return [Text("—")] * 4
    speed = quant.speedup_text(ratio.value, ratio.base_status) if ratio else "—"
    style = "bold red" if ratio and quant.is_slower(ratio.value) else ""
    q, a = quant.cell_record(c), quant.worst_agreement(c)
    return [
        Text(speed, style=style),
        Text(quant.weights_text(q["weight_bytes"], q.get("fp32_weight_bytes")) if q else "—"),
        Text(quant.top1_text(a.top1, a.rows) if a else "—"),
        Text(quant.kl_text(a.kl) if a else "—"),
    ]


def _speed(c: CellResult) -> float | None:
    """Higher is faster: 1 / the latency the table shows (shown_timing), or a scenario
    cell's LoadGen headline (its rate, or 1 / its latency), so a ratio compares like with
    like within a scenario."""
    if c.cell.scenario is None:
        t = shown_timing(c)
        return 1.0 / t.centre_ms if t and t.centre_ms > 0 else None
    view = scenario_view(c)
    if view is None or not view.value:
        return None
    return 1.0 / view.value if view.unit == "ms" else view.value


def size_axes(cells: Iterable[Cell]) -> list[str]:
    """The size axes some cell has, in SIZE_AXES order: ["resolution"] for an image run,
    ["resolution", "seq_len"] for a run mixing a CNN and a transformer, [] for DLRM alone."""
    present = {a for c in cells for a in c.sizes}
    return [a for a in SIZE_AXES if a in present] + sorted(present - set(SIZE_AXES))


def size_heading(axis: str) -> str:
    """A size column's heading, by name and unit, the unit on a line of its own so the
    column stays narrow: 'resolution\n(px)', 'seq len\n(tokens)'."""
    return SIZE_AXES[axis].label.replace(" (", "\n(") if axis in SIZE_AXES else axis


def size_value(cell: Cell, axis: str) -> str:
    """The cell's value on `axis`; blank for a model without that axis (not applicable)."""
    return str(cell.sizes[axis]) if axis in cell.sizes else ""


def _shared(cells: list[CellResult]) -> tuple[list[str], str]:
    """Columns that vary across the run, and a title naming the axes that don't."""
    axes = {
        "model": lambda c: c.cell.model.name,
        "prec": lambda c: c.cell.precision,
        "thr": lambda c: str(c.cell.threads),
        "device": lambda c: c.cell.device,
        "mode": lambda c: c.cell.mode,
    }
    varying, fixed = [], []
    for name, get in axes.items():
        values = sorted({get(c) for c in cells})
        if len(values) > 1:
            varying.append(name)
        elif values:
            fixed.append(values[0] if name != "thr" else f"{values[0]} threads")
    return varying, " · ".join(fixed)


def _timing(c: CellResult) -> tuple[str, Text, Text, Text, Text]:
    """Repetitions, latency, throughput, first call and startup; a disturbed cell's dim
    and marked. The latency's interval is over repetitions, or one repetition's own CI
    marked `within` (shown_timing), never over pooled iterations."""
    mark, style = (DISTURBED_MARK, "dim") if c.status == "disturbed" else ("", "")

    def text(value: str) -> Text:
        return Text("—") if value == "—" else Text(value + mark, style=style)

    timing = shown_timing(c)
    latency = throughput = "—"
    reps = str(len(c.repetitions))
    if timing is not None:
        reps = str(timing.n)
        latency = timing.text()
        throughput = rate(c.cell.batch_size / (timing.centre_ms / 1e3), "/s")
    first, startup = (ms(shown_median_of(c, a)) for a in ("cold_start_ms", "startup_ms"))
    return reps, text(latency), text(throughput), text(first), text(startup)


# What to change when the time cap left a cell unstable (each reason estimates its own).
TIME_CAP_NOTE = (
    "unstable at the time cap: a repetition's median had not reached --target-ci within "
    "--max-time; its reason estimates the --max-time that would, or run --repeats 3 and "
    "read the cell's CI over its repetitions"
)


def _workload_order(cells: list[CellResult]) -> list[CellResult]:
    """Runs execute series by series (so pruning can bite); read them workload by workload,
    the scenarios in the order given (--scenario single-stream,server), not by name, and
    the backends in the run's order."""
    ladder = {b: i for i, b in enumerate(dict.fromkeys(c.cell.backend for c in cells))}
    given = {s: i for i, s in enumerate(dict.fromkeys(_scenario_label(c) for c in cells))}
    return sorted(
        cells,
        key=lambda c: (_group_key(c, WORKLOAD), given[_scenario_label(c)], ladder[c.cell.backend]),
    )


@dataclass(frozen=True)
class _Columns:
    """Which of the table's optional columns a run has.

    One column per size axis of the run, headed by name and unit; a model without that
    axis leaves it blank. Numbers stay numbers (right-aligned, the unit said once, not on
    every row as one "size" column of '224 px' and '128 tokens' would), and an image run
    keeps its single column of pixel sides. LoadGen scenario cells (stackcost.scenarios)
    add their columns, and quantized cells what they buy and cost: speed over fp32,
    weights, agreement; a timed-loop fp32 run's table stays as it was.
    """

    varying: list[str]  # the axes of _shared that differ between cells
    sizes: list[str]
    scenarios: bool
    spread: bool
    quantized: bool

    @classmethod
    def of(cls, cells: list[CellResult], varying: list[str]) -> _Columns:
        return cls(
            varying=varying,
            sizes=size_axes(c.cell for c in cells),
            scenarios=any(c.cell.scenario is not None for c in cells),
            spread=any(c.spreads is not None for c in cells),
            quantized=any(quant.is_quantized(c.cell.precision) for c in cells),
        )

    def names(self, baseline: str) -> list[str]:
        return [
            *self.varying,
            "batch",
            *(size_heading(a) for a in self.sizes),
            "backend",
            *(["scenario"] if self.scenarios else []),
            "status",
            *(["LoadGen", "verdict"] if self.scenarios else []),
            "reps",
            "latency ± CI",
            "throughput",
            f"vs {baseline}",
            "peak RSS (Δ)",
            "first call",
            "startup",
            "rel err",
            *([SPREAD] if self.spread else []),
            *(["vs fp32", "weights", "top-1 agree", "KL"] if self.quantized else []),
        ]


def _status(c: CellResult) -> Text:
    """The cell's status and reason, and a leak where RSS grew with the iteration count in
    repetitions that agree (measure/leak.py), or in the one repetition there is."""
    status = status_text(c.status, cell_reason(c))
    if (leak := c.leak_bytes_per_iter) is not None:
        status.append(f"\nleak {leak / 1024:.1f} KiB/iter", style="red")
    elif (leak := c.leak_suspected_bytes_per_iter) is not None:
        status.append(f"\nleak? {leak / 1024:.1f} KiB/iter (1 rep)", style="yellow")
    return status


def _row(c: CellResult, cols: _Columns, ratio: Ratio | None, over_fp32: Ratio | None) -> list:
    """One cell's row, in _Columns.names' order; user strings as Text, never markup."""
    cell = c.cell
    reps, latency, throughput, first, startup = _timing(c)
    mem = c.peak_memory
    status = _status(c)
    extra = {
        "model": cell.model.name,
        "prec": cell.precision,
        "thr": str(cell.threads),
        "device": cell.device,
        "mode": cell.mode,
    }
    scenario_cols = []
    if cols.scenarios:
        view = scenario_view(c)
        scenario_cols = [
            Text(view.label if view else TIMED_LOOP_LABEL),
            status,
            Text(view.shown() if view else "—"),
            Text(view.verdict if view else "—", style=_verdict_style(view)),
        ]
    return [
        *(Text(extra[v]) for v in cols.varying),
        str(cell.batch_size),
        *(size_value(cell, a) for a in cols.sizes),
        Text(cell.backend),
        *(scenario_cols or [status]),
        reps,
        latency,
        throughput,
        Text(ratio_text(ratio.value, ratio.base_status) if ratio else "—"),
        f"{mib(mem.peak_rss_bytes)} ({mib(mem.peak_over_baseline_bytes)})" if mem else "—",
        first,
        startup,
        sci(c.max_rel_err),
        *([_spread(c)] if cols.spread else []),
        *(_quant_columns(c, over_fp32) if cols.quantized else []),
    ]


def _caption(
    result: RunResult,
    cells: list[CellResult],
    baseline: str,
    speed: dict[int, Ratio],
    cols: _Columns,
) -> str:
    """What the columns mean, then a line for each mark or rule the table uses."""
    caption = (
        "reps = repetitions, each its own process; latency ± CI = the mean of the "
        "repetitions' medians ± the half-width of the 95% t-interval over them; with 1 rep, "
        "its median ± its own CI over its iterations, marked within (one process: it says "
        "nothing of the next); throughput in samples/s; "
        f"vs {baseline} = {baseline}'s latency / this latency on the same workload; "
        "peak RSS with growth over the pre-model baseline; first call = cold call (Inductor "
        "compiles here); startup = backend prepare (export, AOT compile) + first call; "
        "rel err = max|out-ref|/max|ref| vs eager fp32"
    )
    caption += "".join(f"\n{line}" for line in weights_lines(c.cell.model for c in cells))
    if cols.quantized:
        caption += (
            f"\n{quant.SPEEDUP_NOTE}; weights in MB (10^6 bytes), beside the same weights "
            f"in fp32; {quant.ACCURACY_NOTE}"
        )
        caption += "".join(f"\n{line}" for line in quant.isa_lines([(result.run_id, result.env)]))
    if cols.spread:
        caption += "\n" + SPREAD_NOTE
    if (cell_ci := result.spec.get("cell_ci")) is not None:
        caption += "\n" + rule_note(cells, cell_ci, result.spec.get("max_repeats", 0))
    if cols.scenarios:
        caption += "\n" + SCENARIO_CAPTION
    if any(r.base_status != "ok" for r in speed.values()):
        caption += "\n" + ratio_note(baseline)
    if any(c.status == "disturbed" for c in cells):
        caption += "\n" + DISTURBED_NOTE
    if any(c.status == "unstable" and "time cap" in cell_reason(c) for c in cells):
        caption += "\n" + TIME_CAP_NOTE
    return caption


def results_table(result: RunResult, baseline: str = BASELINE) -> Table:
    """The run's cells as a terminal table, workload by workload: latency, throughput and
    the ratio to `baseline` on the same workload, memory, startup and error, with a caption
    that says what the columns and marks mean."""
    cells = _workload_order(result.cells())
    speed = speedups(cells, baseline)
    varying, title = _shared(cells)
    cols = _Columns.of(cells, varying)
    over_fp32 = fp32_speedups(cells) if cols.quantized else {}
    # Model names and reasons come from users and exceptions: Text, never markup.
    table = FitTable(
        title=Text(f"run {result.run_id}: {title}"),
        header_style="bold",
        drop=DROP,
        hint=f" or read `stackcost report {result.run_id} --format md`",
    )
    for name in cols.names(baseline):
        text = name in ("backend", "status", "model", "scenario", "verdict", "weights")
        # fold, not ellipsis: a reason wraps word by word and is never cut short; numbers
        # are right-aligned, which keeps them whole (fit).
        table.add_column(Text(name), justify="left" if text else "right", overflow="fold")
    for i, c in enumerate(cells):
        table.add_row(*_row(c, cols, speed.get(i), over_fp32.get(i)))
    table.caption = Text(_caption(result, cells, baseline, speed, cols))
    return table


def rule_note(cells: list[CellResult], cell_ci: float, max_repeats: int) -> str:
    """What --cell-ci did: the rule, and the cells that reached --max-repeats without it."""
    note = (
        f"reps: each cell repeated until its latency CI was within ±{cell_ci:.1%}, up to "
        f"{max_repeats} processes; those added ran at half --min-time (at least "
        f"{CHEAPEST_S:g} s) where the processes differed by more than their own noise (more of "
        "them average that), else at twice it"
    )
    short = [
        c.cell.label()
        for c in cells
        if (i := c.interval) is not None and i.half_width_rel > cell_ci and i.n >= max_repeats
    ]
    if short:
        note += f"; {len(short)} reached {max_repeats} first: " + ", ".join(short)
    return note


def _spread(c: CellResult) -> str:
    """'1.2% / 7.4% !': within / between (measure.stats.Spreads.shown)."""
    return "—" if c.spreads is None else c.spreads.shown()


def _verdict_style(view: object) -> str:
    verdict = getattr(view, "verdict", "")
    return "green" if verdict == "VALID" else "yellow" if "VALID" in verdict else ""
