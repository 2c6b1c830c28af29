"""The terminal table of a training run: one row per backend, units in the headers."""

from __future__ import annotations

import statistics
from typing import Any

from rich.table import Table
from rich.text import Text

from stackcost.report.fit import FitTable
from stackcost.report.frames.train import STEPS, TOLERANCE_TEXT, agreement, eager_twin
from stackcost.report.marks import (
    DISTURBED_MARK,
    DISTURBED_NOTE,
    cell_reason,
    shown_stats,
    status_text,
)
from stackcost.report.units import ms, rate
from stackcost.result import MEASURED_STATUSES, RepetitionResult
from stackcost.store.runs import CellResult, RunResult

# What a narrow terminal hides first (report/fit.py): the losses, accuracies and rates stay.
DROP = (
    "weights",
    "variant",
    "first step",
    "wall",
    "loader wait",
    "epochs",
    "train acc",
    "step (median)",
    "copy/batch",
    "epoch samples/s",
)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _step(c: CellResult) -> tuple[Text, Text]:
    """Median step and its samples/s: valid cells plain, a disturbed cell dim and marked,
    others (a diverged run) from their last repetition's steps, which are real steps."""
    rep = c.repetitions[-1] if c.repetitions else None
    last = rep.stats if rep else None
    stats = shown_stats(c) if c.status in MEASURED_STATUSES else last
    if stats is None:
        return Text("—"), Text("—")
    mark, style = (DISTURBED_MARK, "dim") if c.status == "disturbed" else ("", "")
    return (
        Text(ms(stats.median_ms) + mark, style=style),
        Text(rate(c.cell.batch_size / (stats.median_ms / 1e3)) + mark, style=style),
    )


def _first_step(rep: RepetitionResult | None) -> Text:
    if rep is None or rep.cold_start_ms is None:
        return Text("—")
    if rep.status == "disturbed":
        return Text(ms(rep.cold_start_ms) + DISTURBED_MARK, style="dim")
    return Text(ms(rep.cold_start_ms))


def _agreement(c: CellResult, cells: list[CellResult]) -> Text:
    """The first losses against eager's: the reference itself, a verdict, or why none."""
    if c.cell.backend == "eager":
        return Text("ref", style="dim")
    found = agreement(c, eager_twin(c, cells))
    if found.max_rel_diff is None:
        return Text("n/a" if found.stochastic else "—", style="dim")
    return Text(
        f"{found.max_rel_diff:.1e}" + ("" if found.agrees else " ✗"),
        style="" if found.agrees else "bold red",
    )


def _place(c: CellResult) -> str:
    """Where a cell trained: its intra-op threads and device, as the cell label writes them."""
    return f"t{c.cell.threads} {c.cell.device}"


def _copy(epochs: list[Any]) -> Text:
    """The host -> device copy per batch, median over epochs, and pinned or pageable."""
    if not epochs or epochs[0].copy_device != "cuda":
        return Text("—", style="dim")
    ms_per_batch = statistics.median(e.copy_ms_per_batch for e in epochs)
    mb = epochs[0].copy_bytes_per_batch / 1e6
    how = "pinned" if epochs[0].copy_pinned else "pageable"
    return Text(f"{ms_per_batch:.3g} ms\n{mb:.3g} MB {how}")


def _title(result: RunResult, cells: list[CellResult], places: set[str]) -> str:
    """'run ID: train MODEL on DATASET ...', and threads and device when the run has one
    of each (else they get a column)."""
    first = cells[0].cell if cells else None
    title = f"run {result.run_id}"
    if first is not None and first.train is not None:
        t = first.train
        title += (
            f": train {first.model.name} on {t.dataset} {first.size_label()} b{first.batch_size}"
            f" {t.optimizer} lr {t.lr:g} x{t.epochs} epochs"
            + (" pageable copies" if t.pageable else "")
        )
        if len(places) == 1:
            title += f" {_place(cells[0])}"
    return title


COLUMNS = (
    "backend",
    "status",
    "variant",
    "epochs",
    "train loss",
    "train acc",
    "eval acc",
    "loss Δ eager",
    "step (median)",
    "step samples/s",
    "epoch samples/s",
    "loader wait",
    "first step",
    "wall",
    "weights",
)


def _add_columns(table: Table, where: bool, gpu: bool) -> None:
    """COLUMNS, after a "where" column when the cells differ in threads or device, and
    before the copy per batch when a cell ran on a GPU."""
    if where:
        table.add_column("where", justify="left", no_wrap=True)
    for name in COLUMNS:
        text = name in ("backend", "status", "variant")
        # A backend and a status are read whole; numbers too (fit): a narrow terminal
        # hides columns instead.
        table.add_column(name, justify="left" if text else "right", no_wrap=text)
    if gpu:
        table.add_column("copy/batch", justify="right")


def _row(c: CellResult, cells: list[CellResult], where: bool, gpu: bool) -> list:
    """One backend's row, in _add_columns' order, from its last repetition's epochs."""
    rep = c.repetitions[-1] if c.repetitions else None
    epochs = rep.epochs if rep else []
    last = epochs[-1] if epochs else None
    step, step_rate = _step(c)
    # Epoch 1 pays the compile: the steady rate is the median over the later epochs.
    steady = [e.train_samples_per_s for e in epochs[1:] if e.complete] or [
        e.train_samples_per_s for e in epochs
    ]
    wait = sum(e.loader_wait_s for e in epochs)
    train_s = sum(e.train_s for e in epochs)
    details = rep.details if rep else {}
    variant = details.get("variant") or ("compiled module" if "compiled" in details else "")
    return [
        *([Text(_place(c))] if where else []),
        Text(c.cell.backend),
        status_text(c.status),
        Text(variant or "—"),
        str(len(epochs)) if epochs else "—",
        f"{last.train_loss:.4f}" if last else "—",
        _pct(last.train_accuracy if last else None),
        _pct(last.eval_accuracy if last else None),
        _agreement(c, cells),
        step,
        step_rate,
        rate(statistics.median(steady)) if steady else "—",
        _pct(wait / train_s) if train_s else "—",
        _first_step(rep),
        f"{rep.phases.total_s:.1f} s" if rep and rep.phases.total_s else "—",
        (rep.weights_digest or "—")[:8] if rep else "—",
        *([_copy(epochs)] if gpu else []),
    ]


CAPTION = (
    "last epoch's train loss/accuracy and held-out eval accuracy; step = forward + "
    "backward + optimizer step (first step, compile included, shown apart); "
    "step samples/s = batch / median step; epoch samples/s = median over epochs after "
    "the first of samples / train-loop wall time; loader wait = share of that wall time "
    "spent collating batches; weights = digest of the initial weights; copy/batch (GPU) = "
    "host -> device copy of a batch, median over epochs; loss Δ eager = "
    f"largest relative difference from eager's loss over the first {STEPS} steps, "
    f"✗ beyond the tolerance ({TOLERANCE_TEXT}; n/a: dropout draws differ per framework)"
)


def train_table(result: RunResult) -> Table:
    """The training run as a terminal table, one row per backend: losses, accuracies, the
    agreement with eager's first losses, step and epoch rates; each failed cell's reason
    under it."""
    cells = result.cells()
    # Threads and device go in the title when the run has one of each, else in a column.
    places = {_place(c) for c in cells}
    where = len(places) > 1
    table = FitTable(  # names from users: no markup
        title=Text(_title(result, cells, places)),
        header_style="bold",
        drop=DROP,
        hint=f" or read `stackcost report {result.run_id}`",
    )
    # A GPU cell copies each batch to the device: its time per batch, and from what memory.
    gpu = any(c.cell.device == "cuda" for c in cells)
    _add_columns(table, where, gpu)
    reasons: list[str] = []  # under the table, whole: its columns are too many to hold them
    for c in cells:
        reason = cell_reason(c) if c.status != "ok" else ""
        if reason:
            reasons.append(f"{c.cell.backend}: {reason}")
        table.add_row(*_row(c, cells, where, gpu))
    caption = CAPTION
    if any(c.status == "disturbed" for c in cells):
        caption += "\n" + DISTURBED_NOTE
    table.caption = Text("\n".join([caption, *reasons]))  # reasons are never markup
    return table
