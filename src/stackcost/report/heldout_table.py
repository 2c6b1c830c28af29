"""The tables of `stackcost heldout`: a classifier's held-out accuracy per rung and
precision, or a decoder's held-out perplexity, each as a terminal table and as markdown
(-o .md), and the line that says where the rows were stored."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from stackcost.report.fit import FitTable

if TYPE_CHECKING:
    from stackcost.scenarios.decoder_heldout import DecoderHeldout
    from stackcost.scenarios.heldout import Heldout

STYLE = {
    "ok": "green",
    "undecided": "yellow",
    "wrong": "bold red",
    "failed": "red",
    "unsupported": "dim",
}
HEADERS = ("backend", "precision", "status", "accuracy", "fp32", "top-1 vs eager fp32", "drop")
DECODER_HEADER = (
    "backend", "precision", "status", "perplexity", "Δppl", "KL mean", "KL p99", "same top",
    "weights", "tokens",
)  # fmt: skip


def stored_line(stored: int, run_id: str | None, db: str) -> str:
    """Where the held-out rows went: `stored` rows as run `run_id` in the store `db`."""
    if run_id is None:
        return "no held-out row to store"
    return f"stored {stored} held-out rows as run {run_id} in {db}"


# -- a classifier: accuracy --------------------------------------------------------------


def _pct(value: float | None, low: float | None = None, high: float | None = None) -> str:
    if value is None:
        return "—"
    return f"{value:.1%}" + ("" if low is None or high is None else f" [{low:.1%}, {high:.1%}]")


def _pt(value: float | None, low: float | None = None, high: float | None = None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} pt" + ("" if low is None or high is None else f" [{low:.1f}, {high:.1f}]")


def _cells(r: Heldout) -> list[str]:
    return [
        r.backend,
        r.precision,
        r.status,
        _pct(r.accuracy),
        _pct(r.fp32_accuracy),
        _pct(r.top1, r.top1_low, r.top1_high),
        _pt(r.drop_pt, r.drop_low_pt, r.drop_high_pt),
        r.reason or r.rule,
    ]


def table(rows: list[Heldout], model: str, dataset: str, weights: Path) -> FitTable:
    """A classifier's rows, each judged against eager fp32 and its rung's fp32."""
    from stackcost.scenarios.heldout import CONFIDENCE

    title = Text(f"held-out accuracy: {model} on {dataset} (weights {weights})")
    t = FitTable(title=title, drop=("top-1 vs eager fp32", "fp32"))
    for h in (*HEADERS, "rule or reason"):
        t.add_column(h, justify="right" if h in HEADERS[3:] else "left")
    for r in rows:
        cells: list[Any] = _cells(r)
        cells[2] = Text(r.status, style=STYLE.get(r.status, ""))
        t.add_row(*(c if isinstance(c, Text) else Text(c) for c in cells))
    t.caption = Text(  # Text: the brackets are the interval's, not rich markup
        "accuracy: top-1 against the test split's labels; fp32: the same rung's fp32 (eager's "
        "where it failed); drop: fp32 - accuracy, in points; a quantized precision is judged "
        "by its rule (axes.QUANTIZED). [low, high]: exact (Clopper-Pearson) for the "
        f"agreement, Tango's score interval for the drop, each bound one-sided "
        f"{(1 + CONFIDENCE) / 2:.0%}, over the {rows[0].samples if rows else 0} held-out "
        "samples: wrong when a rule's interval lies wholly outside it, undecided when the "
        "observed value misses the rule but the interval does not exclude it, ok when each "
        "observed value meets its rule (the reason names an interval reaching past it)"
    )
    return t


def markdown(rows: list[Heldout], model: str, weights: Path) -> str:
    """The classifier's table as markdown."""
    lines = [
        f"Held-out accuracy: {model}, weights {weights}",
        "",
        "| " + " | ".join((*HEADERS, "rule or reason")) + " |",
        "|" + "---|" * (len(HEADERS) + 1),
    ]
    for r in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |")
    return "\n".join(lines) + "\n"


# -- a decoder: perplexity ---------------------------------------------------------------


def _decoder_cells(r: DecoderHeldout) -> list[str]:
    def num(value: float | None, fmt: str, unit: str = "") -> str:
        return "—" if value is None else format(value, fmt) + unit

    reference = (r.backend, r.precision) == ("eager", "fp32")
    options = " ".join(f"{k}={v}" for k, v in sorted(r.options.items()))
    return [
        f"{r.backend} ({options})" if options else r.backend,
        r.precision,
        r.status,
        num(r.perplexity, ".3f"),
        "ref" if reference else _increase(r),
        num(r.kl_mean, ".2e"),
        num(r.kl_p99, ".2e"),
        num(r.same_top, ".1%"),
        num(None if r.weight_bytes is None else r.weight_bytes / 2**20, ".2f", " MiB"),
        str(r.tokens) if r.tokens else "—",
    ]


def _increase(r: DecoderHeldout) -> str:
    """Δppl with its interval: '+0.42% [+0.10, +0.75]'."""
    if r.ppl_increase_pct is None:
        return "—"
    text = f"{r.ppl_increase_pct:+.2f}%"
    if r.ppl_increase_low_pct is not None and r.ppl_increase_high_pct is not None:
        text += f" [{r.ppl_increase_low_pct:+.2f}, {r.ppl_increase_high_pct:+.2f}]"
    return text


def _decoder_note(
    rows: list[DecoderHeldout], model: str, checkpoint: Path, data: str | None = None
) -> list[str]:
    from stackcost.scenarios.decoder_heldout import CONFIDENCE

    windows = max((r.windows for r in rows), default=0)  # an unsupported row scored none
    notes = [
        f"{model} from {checkpoint}, on {data or 'its held-out stdlib-text windows'}: the "
        "second half of each window scored through the rung's teacher-forced path (prefill, "
        "then decode steps); perplexity = exp(mean next-token NLL); Δppl and KL(eager fp32 "
        "|| rung) against eager fp32's full forward, [low, high] a t interval over the "
        f"{windows} windows' paired NLL differences (each bound one-sided "
        f"{(1 + CONFIDENCE) / 2:.0%}); weights = the rung's own weight bytes"
    ]
    notes += [f"{r.backend} {r.precision}: {r.reason}" for r in rows if r.reason]
    rules = sorted({f"{r.precision}: {r.rule}" for r in rows if r.rule})
    return notes + [f"rules: {'; '.join(rules)}"] if rules else notes


def decoder_data(record: dict[str, Any] | None) -> str | None:
    """What a decoder was scored on, in words, from its data record (None: the recipe's
    own held-out text)."""
    return f"{record['data']} ({record['how']})" if record is not None else None


def decoder_table(
    rows: list[DecoderHeldout], model: str, checkpoint: Path, data: str | None = None
) -> FitTable:
    """A decoder's rows, each against eager fp32's perplexity on the same windows."""
    t = FitTable(title=Text(f"held-out text: {model}"))
    for h in DECODER_HEADER:
        t.add_column(h, justify="left" if h in DECODER_HEADER[:3] else "right")
    for r in rows:
        cells = [Text(c) for c in _decoder_cells(r)]
        cells[2] = Text(r.status, style=STYLE.get(r.status, ""))
        t.add_row(*cells)
    t.caption = Text("; ".join(_decoder_note(rows, model, checkpoint, data)))
    return t


def decoder_markdown(
    rows: list[DecoderHeldout], model: str, checkpoint: Path, data: str | None = None
) -> str:
    """The decoder's table as markdown, its notes below it."""
    lines = ["| " + " | ".join(DECODER_HEADER) + " |", "|" + "---|" * len(DECODER_HEADER)]
    lines += ["| " + " | ".join(_decoder_cells(r)) + " |" for r in rows]
    return "\n".join([*lines, "", *_decoder_note(rows, model, checkpoint, data), ""])
