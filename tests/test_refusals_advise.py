"""`stackcost advise` refuses bad input where it enters: one line, exit 2, no store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_refusals_edges import refused_and_nothing_stored

ADVISE = ["advise", "mlp", "--backends", "eager", "--threads", "1", "--quiet"]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--objective", "speed"], "objective 'speed' is not one advise optimizes"),
        (["--budget", "20"], "--budget '20' is not a duration with a unit"),
        (["--max-memory", "2G"], "--max-memory '2G' is not a size with a unit"),
        (["--percentile", "p95"], "percentile 'p95'"),
        (["--backends", "nope"], "unknown backend 'nope'"),
        (["--margin", "1.5"], "--margin '1.5'"),
        (["--finalists", "0"], "--finalists 0"),
        (["--latency-bound", "20"], "--latency-bound '20' needs a unit"),
        (["--threads", "4096"], "threads 4096"),
        (["--precision", "int3"], "unknown precision 'int3'"),
        (["--min-throughput", "-5"], "--min-throughput '-5'"),
        (["--max-quality-loss", "x"], "--max-quality-loss 'x' is not a number"),
        (["--scenario", "offline"], "--scenario 'offline' is not one advise searches"),
        (["--ttft-bound", "1s"], "--ttft-bound applies to token generation"),
        (["--tpot-bound", "1s"], "--tpot-bound applies to token generation"),
        (["--serve-time", "5s"], "--serve-time applies to --scenario serve"),
        (["--scenario", "serve", "--serve-time", "5"], "serve-time"),
        (["--scenario", "serve", "--objective", "latency"], "does not rank served engines"),
        (
            ["--max-quality-loss", "100"],
            "--max-quality-loss '100' must be a finite number in [0, 100)",
        ),
        (["--data", "test.csv"], "--data is the examples --max-quality-loss is judged on"),
        (["--max-quality-loss", "1", "--data", "t.csv"], "'mlp' is not one"),
    ],
)
def test_advise_refuses_bad_input_in_one_line(extra, needle, capsys, tmp_path: Path):
    err = refused_and_nothing_stored([*ADVISE, *extra], capsys, tmp_path)
    assert needle in err, err
