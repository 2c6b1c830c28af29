"""Terminal tables fit the terminal and never cut a number (report/fit.py): a narrow
terminal hides the least important columns and says which under the table."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from stackcost.cell import Cell
from stackcost.measure.stats import summarize
from stackcost.report.fit import FitTable, fit, heading, is_number
from stackcost.report.terminal.generate import generate_table
from stackcost.report.terminal.run import results_table
from stackcost.report.terminal.train import train_table
from stackcost.result import GenerationResult, Memory, Phases, RepetitionResult
from stackcost.runspec.run import model_ref
from stackcost.store.runs import RunResult
from stackcost.verify import Verification
from tests.report.marks_fixtures import marks_run

# `make demo`'s grid: six rungs, batch 1 and 8, one resolution, two threads.
DEMO = ("eager", "torchscript", "inductor", "export-aot", "onnxruntime", "openvino")


def _demo_run() -> RunResult:
    records = []
    for batch in (1, 8):
        for i, backend in enumerate(DEMO):
            cell = Cell(
                model=model_ref("resnet18"),
                backend=backend,
                batch_size=batch,
                sizes={"resolution": 64},
                threads=2,
            )
            for r in range(3):
                step_ms = 12.3456 * batch / (1 + 0.3 * i) * (1 + 0.01 * r)
                samples = [int(step_ms * 1e6 * (1 + 0.001 * k)) for k in range(20)]
                rep = RepetitionResult(
                    status="ok",
                    repetition=r,
                    stats=summarize(samples),
                    samples_ns=samples,
                    throughput=batch / step_ms * 1e3,
                    cold_start_ms=1234.5 * (i + 1),
                    memory=Memory(
                        baseline_rss_bytes=300 * 2**20,
                        peak_rss_bytes=1234 * 2**20,
                        peak_over_baseline_bytes=934 * 2**20,
                    ),
                    verification=Verification(
                        max_abs_err=1e-6, max_rel_err=4.93e-6 * i, tolerance=1e-4, ok=True
                    ),
                    phases=Phases(prepare_s=3.2 * i),
                )
                records.append((cell, rep))
    return RunResult(run_id="demo", db_path=Path("demo.db"), env={}, spec={}, records=records)


def _generate_run() -> RunResult:
    """hf:qwen2's shape of numbers: decode rates in the tens of thousands, errors 4.9e-06."""
    records = []
    for batch in (1, 8):
        for i, backend in enumerate(("eager", "inductor", "onnxruntime")):
            cell = Cell(
                model=model_ref("hf:qwen2"),
                backend=backend,
                batch_size=batch,
                mode="generate",
                sizes={"prompt_len": 128, "new_tokens": 64},
            )
            gen = GenerationResult(
                batch=batch,
                prompt_len=128,
                new_tokens=64,
                generations=3,
                ttft_ms=123.456 * batch,
                tpot_p50_ms=18.52 / (i + 1),
                tpot_p90_ms=19.7,
                tpot_p99_ms=20.1,
                prefill_tokens_per_s=12345.6 * batch,
                decode_tokens_per_s=54012.3 * batch / (i + 1),
                output_tokens_per_s=500.0,
                e2e_ms=1000.0,
                cold_ms=4567.8,
                kv_cache_bytes=3 * 2**20 * batch,
                kv_bytes_per_element=2,
                weight_bytes=10**9,
                bytes_per_step=10**9,
                achieved_gbs=54.3,
                api="generate",
                timing="host clock",
                token_agreement=0.98,
            )
            verification = Verification(
                max_abs_err=1e-6, max_rel_err=4.93e-6, tolerance=1e-4, ok=True
            )
            records.append(
                (cell, RepetitionResult(status="ok", generation=gen, verification=verification))
            )
    env = {"peaks": {"1": {"read_gbs": 100.0}}}
    return RunResult(run_id="gen", db_path=Path("gen.db"), env=env, spec={}, records=records)


def _plain(renderable: object) -> str:
    return renderable.plain if isinstance(renderable, Text) else str(renderable)


def render(table: Table, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(table)
    return console.export_text()


def check_fits(table: FitTable, width: int, keep: tuple[str, ...]) -> set[str]:
    """Render `table` at `width`; assert what the issue asks; return the hidden headings."""
    text = render(table, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text
    shown = table.fitted(Console(width=width), width).columns
    names = [heading(c) for c in shown]
    assert set(keep) <= set(names), "a column that matters was hidden"
    numbers = [c for c in shown if is_number(c)]
    assert numbers
    for column in numbers:
        for cell in column.cells:
            for part in _plain(cell).splitlines():
                assert any(part in line for line in lines), f"{part!r} is cut"
    hidden = {heading(c) for c in table.columns} - set(names)
    flat = " ".join(text.split())  # the note wraps as the caption does
    note = re.search(rf"hidden at {width} columns: (.*?); widen the terminal", flat)
    assert set(note[1].split(", ") if note else []) == hidden
    return hidden


@pytest.mark.parametrize("width", [80, 120])
def test_the_demo_table_fits_with_its_numbers_whole(width):
    table = results_table(_demo_run())
    hidden = check_fits(table, width, ("batch", "backend", "status", "latency ± CI", "vs eager"))
    assert hidden and "latency ± CI" not in hidden  # 158 columns wide in full
    assert "`stackcost report demo --format md`" in " ".join(render(table, width).split())


@pytest.mark.parametrize("width", [80, 120])
def test_the_generate_table_fits_with_its_numbers_whole(width):
    table = generate_table(_generate_run())
    hidden = check_fits(table, width, ("batch", "backend", "TTFT", "TPOT p50", "decode tok/s"))
    assert "cold" in hidden
    text = render(table, width)
    assert "54,012" in text and "432,098" in text  # were '54,0…'
    # One model, precision and prompt: said once, in the title, not a column each.
    assert "hf:qwen2 · fp32 · prompt len 128 tokens · new tokens 64 tokens" in " ".join(
        text.split()
    )


@pytest.mark.parametrize("width", [80, 120])
def test_the_train_table_fits_with_its_numbers_whole(width):
    check_fits(train_table(marks_run()), width, ("backend", "status"))


def test_a_wide_terminal_shows_the_table_as_it_was():
    table = results_table(_demo_run())
    assert table.fitted(Console(width=250), 250) is table
    assert "hidden at" not in render(table, 250) and "peak RSS (Δ)" in render(table, 250)


def test_fit_leaves_the_table_it_is_given_whole():
    """A table printed at two widths: the narrow print hides nothing of the wide one."""
    table = results_table(_demo_run())
    render(table, 80)
    assert len(table.columns) == len(fit(table, Console(width=250), 250).columns)


def test_numbers_stay_whole_when_nothing_may_be_hidden():
    """No column left to hide: the reason wraps, then a number cell wraps at its spaces,
    but no number is split and no name folds (a disturbed run at 80 columns)."""
    table = Table(title="t")
    for name in ("batch", "backend", "status", "latency ± CI", "vs eager"):
        text = name in ("backend", "status")
        table.add_column(name, justify="left" if text else "right", overflow="fold")
    reason = (
        "disturbed: other processes used 0.93 cores during the timed loop (threshold "
        "0.88); its numbers are kept but not trusted"
    )
    table.add_row("1", "eager", "ok", "151.8 µs ± 0.8% within", "1.00×")
    table.add_row("1", "onnxruntime", reason, "86.8 µs ± 0.8% within†", "—")
    table.add_row("8", "onnxruntime", reason, "1,378.0 µs ± 11.5% within†", "—")
    for width in (60, 80):
        text = render(fit(table, Console(width=width), width), width)
        lines = text.splitlines()
        assert "…" not in text and max(map(len, lines)) <= width
        words = {w for line in lines for w in line.replace("│", " ").split()}
        assert "onnxruntime" in words and "disturbed:" in words
        for cell in ("151.8 µs ± 0.8% within", "1,378.0 µs ± 11.5% within†", "1.00×"):
            assert set(cell.split()) <= words, f"{cell!r} was cut"
