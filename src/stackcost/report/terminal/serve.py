"""The terminal table of a serve run: each engine's rate sweep (frames/serve.py), the SLO
and the highest rate each engine held within it under the table."""

from __future__ import annotations

from rich.table import Table

from stackcost.report.fit import FitTable
from stackcost.report.frames.serve import (
    CAPTION,
    HEADER,
    few_note,
    serve_cells,
    serve_rows,
    slo_line,
)
from stackcost.report.marks import status_text
from stackcost.report.units import ms
from stackcost.store.runs import RunResult

# The terminal shows notes under the table (they are long); a narrow one hides these first.
TERMINAL = HEADER[:-1]
DROP = ("ITL p99", "in flight", "TPOT p50", "TTFT p50", "tok/s", "done")


def serve_table(result: RunResult) -> Table:
    cells = serve_cells(result)
    serve = cells[0].cell.serve if cells else None
    slo = ""
    if serve is not None:
        slo = f" · SLO TTFT {ms(serve.ttft_bound_ms)}, TPOT {ms(serve.tpot_bound_ms)}"
    notes: list[str] = []
    table = FitTable(*TERMINAL, drop=DROP, title=f"run {result.run_id}: serve{slo}")
    rows = serve_rows(result)
    for row in rows:
        *cols, note = row["cols"]
        if row["label"] is None:  # no sweep: the status, marked as every table marks it
            cols[1] = status_text(cols[1])
        table.add_row(*cols)
        if note:
            where = row["backend"] if row["label"] is None else f"{row['backend']} {row['label']}"
            notes.append(f"{where}: {note}")
    table.caption = "\n".join([CAPTION, *few_note(rows), slo_line(result), *notes])
    return table
