"""Serve and generate flags are checked where they enter, with the model's facts: each
defect once found inside a worker (a failed, `oom` or even `ok` cell seconds later) is now
one line, exit 2, no traceback, no store, in well under 5 s."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from stackcost.serving import lengths
from tests.test_refusals_edges import refused_and_nothing_stored
from tests.test_refusals_files import refused

RUN = ["run", "llama-tiny", "--backends", "eager", "--quiet"]
SERVE = [*RUN, "--scenario", "serve", "--prompt-len", "8", "--new-tokens", "4"]


def refused_fast(argv: list[str], capsys: pytest.CaptureFixture[str], directory: Path) -> str:
    t0 = time.perf_counter()
    err = refused_and_nothing_stored(argv, capsys, directory)
    assert time.perf_counter() - t0 < 5.0, err
    return err


def trace(directory: Path, name: str, content: bytes) -> str:
    path = directory / "given" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return f"file:{path}"


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"\x00\x01\xff\xfe8,4\n", "not text (byte 2 is not UTF-8)"),
        (b"", "no prompt_len,new_tokens line in it"),
        (b"# only a comment\n\n", "no prompt_len,new_tokens line in it"),
        (b"8,4\n-3,4\n", "lengths.csv:2: lengths must be at least 1, not '-3,4'"),
        (b"8,4\n" * 5000 + b"8,x\n", "lengths.csv:5001: '8,x' is not prompt_len,new_tokens"),
        (b"8,4\n3000,4\n", "may ask 3004 tokens of one request, more than llama-tiny's 2048"),
    ],
)
def test_a_lengths_file_is_read_in_full_before_any_worker(capsys, tmp_path, content, needle):
    spec = trace(tmp_path, "lengths.csv", content)
    assert needle in refused_fast([*SERVE, "--lengths", spec], capsys, tmp_path)


def test_a_lengths_file_beyond_its_size_limit_is_refused_unread(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(lengths, "MAX_TRACE_BYTES", 1024)
    spec = trace(tmp_path, "lengths.csv", b"8,4\n" * 300)
    err = refused_fast([*SERVE, "--lengths", spec], capsys, tmp_path)
    assert "1,200 bytes is more than a lengths file may hold (1,024" in err


def test_a_lengths_file_beyond_its_line_limit_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(lengths, "MAX_TRACE_LINES", 100)
    spec = trace(tmp_path, "lengths.csv", b"8,4\n" * 101)
    assert "more than 100 lines" in refused_fast([*SERVE, "--lengths", spec], capsys, tmp_path)


@pytest.mark.parametrize(
    "argv, needle",
    [
        # A bound that is not finite.
        ([*SERVE, "--lengths", "uniform:1-inf"], "uniform needs finite 0 < LO <= HI"),
        ([*SERVE, "--lengths", "uniform:nan-1"], "uniform needs finite 0 < LO <= HI"),
        # Lengths beyond the positions, from a distribution.
        ([*SERVE, "--lengths", "uniform:1-300"],
         "'uniform:1-300' at prompt-len 8, new-tokens 4 may ask 3600 tokens of one request, "
         "more than llama-tiny's 2048 positions"),
        # A prompt and new tokens that each fit, but not together.
        ([*RUN, "--scenario", "generate", "--prompt-len", "2000", "--new-tokens", "100"],
         "prompt-len 2000 + new-tokens 100 = 2100 tokens is more than llama-tiny's 2048"),
        ([*RUN, "--scenario", "serve", "--prompt-len", "1024", "--new-tokens", "1025"],
         "prompt-len 1024 + new-tokens 1025 = 2049 tokens"),
        ([*RUN, "--scenario", "generate", "--prompt-len", "8,1500", "--new-tokens", "600"],
         "prompt-len 1500 + new-tokens 600 = 2100 tokens"),
        # A rate count far beyond what any sweep holds, and one beyond its budget.
        ([*SERVE, "--serve-rates", "1000000"], "serve-rates 1000000 is outside 0..64"),
        ([*SERVE, "--serve-rates", "20", "--serve-time", "15s", "--serve-budget", "240s"],
         "serve-rates 20 does not fit serve-budget 240 s at serve-time 15 s: it holds the two "
         "ends and at most 14 rates between"),
        # A budget too small for any rate.
        ([*SERVE, "--serve-budget", "1s"],
         "serve-budget 1 s is less than the sweep's two ends need at serve-time 15 s"),
        # A serve flag outside --scenario serve, even at its default value.
        ([*RUN, "--serve-rates", "4"], "apply only with --scenario serve"),
        ([*RUN, "--scenario", "generate", "--arrivals", "poisson"],
         "apply only with --scenario serve"),
        ([*RUN, "--lengths", "fixed"], "apply only with --scenario serve"),
        # A serve grid in which no cell can run.
        ([*SERVE, "--backends", "torchscript"], "no cell can run here (1 cell): 1 unsupported"),
        ([*SERVE, "--batch-size", "4"],
         "a serve request is one sequence (batch 1), not 4"),
        ([*SERVE, "--precision", "int8-dyn"],
         "serve runs fp32 engines here, not int8-dyn"),
    ],
)  # fmt: skip
def test_serve_and_generate_flags_are_checked_where_they_enter(capsys, tmp_path, argv, needle):
    assert needle in refused_fast(argv, capsys, tmp_path)


def test_a_serve_grid_where_some_cell_runs_stores_the_others_without_a_worker():
    from stackcost.execute.probe import ask
    from stackcost.execute.runner import why_not_runnable
    from stackcost.runspec.run import model_ref, validate

    spec = validate(
        {
            "models": [model_ref("llama-tiny")],
            "backends": ["eager", "onnxruntime"],
            "batch_sizes": [1, 2],
            "scenarios": ["serve"],
            "sizes": {"prompt_len": [8], "new_tokens": [4]},
        }
    )
    facts = ask([], {b: {} for b in spec.backends}, {}, 60.0).facts
    verdicts = {(c.backend, c.batch_size): why_not_runnable(c, facts) for c in spec.cells()}
    assert verdicts[("eager", 1)] is None and verdicts[("onnxruntime", 1)] is None
    assert verdicts[("eager", 2)] == (
        "unsupported",
        "a serve request is one sequence (batch 1), not 2: the engine batches the requests "
        "that are in flight",
    )


def test_peaks_checks_threads_against_the_machine(capsys, tmp_path):
    err = refused(["peaks", "--threads", "4096", "--cache-dir", str(tmp_path / "c")],
                  capsys, tmp_path)  # fmt: skip
    assert "threads 4096 is more than the" in err and "CPUs this process may use" in err


def test_heldout_refuses_a_decoder_window_too_short_to_score_before_training(capsys, tmp_path):
    argv = [
        "heldout", "llama-tiny", "-c", "vocab_size=512", "--prompt-len", "1", "--epochs", "1",
        "--weights-dir", str(tmp_path / "w"), "--backends", "eager", "--precision", "fp32",
    ]  # fmt: skip
    err = refused_fast(argv, capsys, tmp_path)
    assert "--prompt-len 1: a held-out window needs at least 2 tokens" in err
    assert not (tmp_path / "w").exists()


def test_new_tokens_outside_generate_and_serve_is_refused(capsys, tmp_path):
    err = refused_fast([*RUN, "--new-tokens", "8"], capsys, tmp_path)
    assert "new-tokens applies only with --scenario generate or serve" in err
