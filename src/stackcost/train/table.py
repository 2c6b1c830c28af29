"""The terminal table of a training run: one row per backend, units in the headers."""

from __future__ import annotations

import statistics

from rich.table import Table

from stackcost.report.units import ms, rate
from stackcost.runs import RunResult

STATUS_STYLE = {"ok": "green", "unsupported": "yellow", "unavailable": "yellow"}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def train_table(result: RunResult) -> Table:
    cells = result.cells()
    first = cells[0].cell if cells else None
    title = f"run {result.run_id}"
    if first is not None and first.train is not None:
        t = first.train
        title += (
            f": train {first.model.name} on {t.dataset} r{first.resolution} b{first.batch_size}"
            f" {t.optimizer} lr {t.lr:g} x{t.epochs} epochs t{first.threads} {first.device}"
        )
    table = Table(title=title, header_style="bold")
    for name in (
        "backend",
        "status",
        "variant",
        "epochs",
        "train loss",
        "train acc",
        "eval acc",
        "step (median)",
        "step samples/s",
        "epoch samples/s",
        "loader wait",
        "first step",
        "wall",
        "weights",
    ):
        table.add_column(name, justify="left" if name in ("backend", "status") else "right")
    for c in cells:
        style = STATUS_STYLE.get(c.status, "red")
        status = f"[{style}]{c.status}[/]"
        if c.reason and c.status != "ok":
            status += f"\n[dim]{c.reason[:60]}[/]"
        rep = c.repetitions[-1] if c.repetitions else None
        epochs = rep.epochs if rep else []
        last = epochs[-1] if epochs else None
        stats = c.stats if c.status in ("ok", "unstable") else (rep.stats if rep else None)
        # Epoch 1 pays the compile: the steady rate is the median over the later epochs.
        steady = [e.train_samples_per_s for e in epochs[1:] if e.complete] or [
            e.train_samples_per_s for e in epochs
        ]
        wait = sum(e.loader_wait_s for e in epochs)
        train_s = sum(e.train_s for e in epochs)
        details = rep.details if rep else {}
        variant = details.get("variant") or ("compiled module" if "compiled" in details else "")
        table.add_row(
            c.cell.backend,
            status,
            variant or "—",
            str(len(epochs)) if epochs else "—",
            f"{last.train_loss:.4f}" if last else "—",
            _pct(last.train_accuracy if last else None),
            _pct(last.eval_accuracy if last else None),
            ms(stats.median_ms) if stats else "—",
            rate(c.cell.batch_size / (stats.median_ms / 1e3)) if stats else "—",
            rate(statistics.median(steady)) if steady else "—",
            _pct(wait / train_s) if train_s else "—",
            ms(rep.cold_start_ms) if rep else "—",
            f"{rep.phases.total_s:.1f} s" if rep and rep.phases.total_s else "—",
            (rep.weights_digest or "—")[:8] if rep else "—",
        )
    table.caption = (
        "last epoch's train loss/accuracy and held-out eval accuracy; step = forward + "
        "backward + optimizer step (first step, compile included, shown apart); "
        "step samples/s = batch / median step; epoch samples/s = median over epochs after "
        "the first of samples / train-loop wall time; loader wait = share of that wall time "
        "spent collating batches; weights = digest of the initial weights"
    )
    return table
