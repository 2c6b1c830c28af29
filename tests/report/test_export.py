import io
import json

import pandas as pd
import pytest

from stackcost.report.exports.formats import export
from tests.report.conftest import BACKENDS, BATCHES, EVIL_MODEL, REPEATS, RESOLUTIONS

GRID_CELLS = len(BACKENDS) * len(BATCHES) * len(RESOLUTIONS)
CELLS = GRID_CELLS + 4  # + wrong, failed, the hostile model's valid cell, skipped


def test_markdown_table(runs):
    lines = [line for line in export(runs, "md").splitlines() if line.startswith("|")]
    assert len(lines) == 2 + CELLS
    assert "median (ms)" in lines[0] and "throughput (samples/s)" in lines[0]
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[2:])
    cols = lines[0].count(" | ")
    assert all(line.count(" | ") - line.count("\\|") == cols for line in lines[2:])
    assert EVIL_MODEL not in "\n".join(lines)  # rendered markdown must not see raw HTML
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in lines[2] + lines[3] + lines[4]
    wrong = next(line for line in lines if "| wrong |" in line)
    assert "123.5" not in wrong


def test_csv_is_the_tidy_frame(runs):
    df = pd.read_csv(io.StringIO(export(runs, "csv")))
    assert len(df) == GRID_CELLS * REPEATS + REPEATS + 3
    assert {"run_id", "cell_key", "backend", "median_ms", "status", "reason"} <= set(df.columns)
    assert df.loc[df["status"] == "wrong", "median_ms"].isna().all()
    assert EVIL_MODEL in set(df["model"])


def test_json_has_cells_and_metadata(runs):
    payload = json.loads(export(runs, "json"))
    assert len(payload["cells"]) == CELLS
    (run,) = payload["runs"]
    assert run["run_id"] == runs[0].run_id and run["env"]["versions"]["torch"] == "2.13.0"
    assert run["spec"]["find_max_batch"] is True
    wrong = next(c for c in payload["cells"] if c["status"] == "wrong")
    assert wrong["median_ms"] is None and wrong["throughput_per_s"] is None
    assert wrong["max_rel_err"] == 0.5
    ts = [c for c in payload["cells"] if c["backend"] == "torchscript" and c["valid"]]
    assert all(0.5 < c["time_ratio"] < 0.7 for c in ts)


def test_empty_and_unknown_format(runs):
    assert json.loads(export([], "json"))["cells"] == []
    assert len(export([], "md").splitlines()) == 2
    with pytest.raises(ValueError, match="unknown export format"):
        export(runs, "xlsx")
