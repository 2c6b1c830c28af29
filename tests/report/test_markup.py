"""Reasons, names and paths reach the terminal verbatim and whole: never as rich markup."""

from __future__ import annotations

import importlib.util
import re

import pytest
from rich.console import Console

from stackcost.cli import main
from stackcost.report.terminal.progress import LiveProgress
from stackcost.report.terminal.run import results_table
from stackcost.report.terminal.train import train_table
from stackcost.result import RepetitionResult
from tests.report.marks_fixtures import EAGER_MS, cell, marks_run, rep

OOM = (
    "RuntimeError: [enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: "
    "not enough memory: you tried to allocate 8589934592 bytes."
)
INSTALL = "onnxruntime not installed: pip install 'stackcost[onnx]'"
# Longer than any column: every word must come through whole, none cut in the middle.
LONG = (
    "worker exited before its result: the native program libtorch_runner was killed by "
    "signal 9 (SIGKILL) after 312.5 s while building the conv3x3 dilated weights cache"
)
MARKUP_NAME = "mypkg.models:[bold]net[/bold]"


def _records():
    return [
        (cell("eager", 1), RepetitionResult(status="oom", reason=f"Traceback ...\n{OOM}")),
        (cell("onnxruntime", 1), RepetitionResult(status="unavailable", reason=INSTALL)),
        (cell("torchscript", 1), RepetitionResult(status="crashed", reason=LONG)),
        (cell("eager", 2), rep(EAGER_MS)),
    ]


def render(table, width: int = 200) -> str:
    console = Console(record=True, width=width)
    console.print(table)
    return console.export_text()


def test_reasons_appear_verbatim_in_the_run_table():
    text = render(results_table(marks_run(_records())), width=400)
    assert OOM in text and INSTALL in text and LONG in text
    assert "Traceback" not in text  # the headline, not the first line


@pytest.mark.parametrize("width", [160, 200])  # 160: the CLI's width for piped output
def test_a_long_reason_wraps_but_is_never_cut(width):
    text = render(results_table(marks_run(_records())), width=width)
    words = set(re.findall(r"[^\s│]+", text))
    assert all(word in words for word in LONG.split()), "a word of the reason was cut"
    assert "…" not in text


def test_reasons_appear_verbatim_in_the_train_table():
    text = render(train_table(marks_run(_records())), width=400)
    assert OOM in text and INSTALL in text and LONG in text


def test_markup_in_a_model_name_is_text():
    model = cell("eager", 1).model.model_copy(update={"name": MARKUP_NAME})
    c = cell("eager", 1).model_copy(update={"model": model})
    other = c.model_copy(update={"backend": "torchscript"})
    text = render(results_table(marks_run([(c, rep(EAGER_MS)), (other, rep(EAGER_MS))])))
    assert MARKUP_NAME in text


def test_live_progress_prints_reasons_verbatim():
    console = Console(record=True, width=400)
    progress = LiveProgress(console)
    c = cell("eager", 1)
    progress.start(c, 0)
    progress.result(c, RepetitionResult(status="oom", reason=OOM), 1, 2)
    progress.result(c, RepetitionResult(status="unavailable", reason=INSTALL), 2, 2)
    text = console.export_text()
    assert OOM in text and INSTALL in text


def test_list_backends_keeps_the_install_hint(monkeypatch, capsys):
    real = importlib.util.find_spec

    def without_onnxruntime(name, *args, **kwargs):
        return None if name == "onnxruntime" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_onnxruntime)
    assert main(["list", "backends"]) == 0
    out = capsys.readouterr().out
    assert "pip install 'stackcost[onnx]'" in out
