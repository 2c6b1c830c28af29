"""A serve run's numbers, as every view of it reads them (terminal/serve.py,
exports/serve.py, the page): each engine's rate sweep as rows, and the highest rate each
engine held within the SLO. One repetition's sweep per cell is shown (the last valid one):
a sweep's rates are not pooled across processes."""

from __future__ import annotations

from stackcost.report.units import ms, rate
from stackcost.result import (
    MEASURED_STATUSES,
    RateFigures,
    RepetitionResult,
    ServeResult,
    Spread,
    headline,
)
from stackcost.serving.records import ENOUGH_NOTE, enough, held, highest_held
from stackcost.store.runs import CellResult, RunResult

CAPTION = (
    "open-loop load (serving/client.py): one request at a time, all at once, then rates "
    "between; TTFT = first token at the client - request sent; TPOT = (last - first "
    "token) / (tokens - 1), per request; ITL = gaps between streamed arrivals; req/s and "
    "tok/s = completed requests and their output tokens over first send to last token; "
    "goodput = requests/s within both SLOs; held = p99 TTFT and p99 TPOT within the SLOs"
)
HEADER = (
    "backend", "rate", "done", "req/s", "tok/s", "TTFT p50", "TTFT p99", "TPOT p50",
    "TPOT p99", "ITL p99", "goodput", "in flight", "held", "notes",
)  # fmt: skip


def measured(c: CellResult) -> RepetitionResult | None:
    """The cell's last repetition with a sweep: a valid one, else one taken while the
    machine was busy (shown marked, as every view shows a disturbed repetition)."""
    reps = [r for r in c.repetitions if r.serving is not None and r.status in MEASURED_STATUSES]
    valid = [r for r in reps if r.valid]
    return (valid or reps or [None])[-1]


def sweep_of(c: CellResult) -> ServeResult | None:
    rep = measured(c)
    return None if rep is None else rep.serving


def in_order(sweep: ServeResult) -> list[RateFigures]:
    """One at a time, then the rates by their schedule's rate, all at once last (a burst,
    not a rate). Not by achieved rate: a short window's drain lowers that."""
    order = {"sequential": 0, "burst": 2}
    return sorted(sweep.rates, key=lambda f: (order.get(f.process, 1), f.target_rps or 0.0))


def best_rate(c: CellResult) -> RateFigures | None:
    """The highest achieved arrival rate the cell's engine held within the SLO, from a
    valid sweep only. All at once is not a rate a server sustains (its requests arrive in
    one instant), so it is not a candidate."""
    rep, serve = measured(c), c.cell.serve
    if rep is None or not rep.valid or serve is None:
        return None
    assert rep.serving is not None
    return highest_held(rep.serving.rates, serve.ttft_bound_ms, serve.tpot_bound_ms)


def serve_cells(result: RunResult) -> list[CellResult]:
    return [c for c in result.cells() if c.cell.serve is not None]


def pct(spread: Spread, percentile: float) -> str:
    """A percentile in ms, marked † where it rests on too few requests (serving/records)."""
    value = getattr(spread, f"p{percentile:g}")
    shown = ms(value)
    return shown if value is None or enough(spread, percentile) else f"{shown}†"


def _row(c: CellResult, fig: RateFigures) -> list[str]:
    serve, rep = c.cell.serve, measured(c)
    assert serve is not None and rep is not None
    ok = held(fig, serve.ttft_bound_ms, serve.tpot_bound_ms)
    notes = "; ".join([*fig.errors, *([fig.ended_by] if fig.ended_by else [])])
    backend = c.cell.backend if rep.valid else f"{c.cell.backend} ({rep.status})"
    return [
        backend, fig.label, f"{fig.completed}/{fig.sent}", rate(fig.request_rps, ""),
        rate(fig.output_tokens_per_s, ""), pct(fig.ttft_ms, 50), pct(fig.ttft_ms, 99),
        pct(fig.tpot_ms, 50), pct(fig.tpot_ms, 99), pct(fig.itl_ms, 99),
        rate(fig.goodput_rps, "") if fig.goodput_rps is not None else "—",
        str(fig.in_flight_peak), "yes" if ok else "no", notes,
    ]  # fmt: skip


def slo_line(result: RunResult) -> str:
    """Each engine's highest rate within the SLO, best first."""
    parts = []
    for c in serve_cells(result):
        best = best_rate(c)
        held_at = "none held" if best is None else f"{best.request_rps:.3g} req/s ({best.label})"
        parts.append((best.request_rps if best else -1.0, f"{c.cell.backend}: {held_at}"))
    return "highest rate within the SLO: " + ", ".join(p for _, p in sorted(parts, reverse=True))


def serve_rows(result: RunResult) -> list[dict]:
    """One row per rate of each cell's sweep, or one row saying why a cell has none: its
    status, its columns (HEADER's, notes last) and, for a rate, its label. Every view
    (terminal, markdown, HTML) is drawn from these."""
    rows: list[dict] = []
    for c in serve_cells(result):
        backend, rep = c.cell.backend, measured(c)
        if rep is None or rep.serving is None:
            last = c.repetitions[-1] if c.repetitions else None
            status = last.status if last else "missing"
            why = headline(last.reason) if last and last.reason else ""
            cols = [backend, status, *[""] * (len(HEADER) - 3), why]
            rows.append({"backend": backend, "status": status, "label": None, "cols": cols})
            continue
        rows.extend(
            {"backend": backend, "status": rep.status, "label": fig.label, "cols": _row(c, fig)}
            for fig in in_order(rep.serving)
        )
    return rows


def few_note(rows: list[dict]) -> list[str]:
    """The † rule, where some percentile of `rows` rests on too few requests."""
    return [ENOUGH_NOTE] if any("†" in v for row in rows for v in row["cols"][:-1]) else []
