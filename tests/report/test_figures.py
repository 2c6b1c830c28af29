import sys

from stackcost.report.figures.write import write_figures


def test_png_and_pdf_written(runs, tmp_path):
    paths = write_figures(runs, tmp_path / "figs")
    stems = {p.stem for p in paths}
    assert stems == {
        "latency_vs_batch-mlp",
        "throughput_vs_batch-mlp",
        "latency_vs_resolution-mlp",
        "memory_vs_batch-mlp",
        "ratio_to_eager",
    }
    magic = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-"}
    for p in paths:
        assert p.read_bytes().startswith(magic[p.suffix]) and p.stat().st_size > 5_000
    assert sorted(p.suffix for p in paths) == [".pdf"] * 5 + [".png"] * 5


def test_single_valued_axes_get_no_sweep_figure(single_batch_runs, failed_runs, tmp_path):
    assert [p.name for p in write_figures(single_batch_runs, tmp_path)] == [
        "ratio_to_eager.png",
        "ratio_to_eager.pdf",
    ]
    assert write_figures(failed_runs, tmp_path / "none") == []
    assert write_figures([], tmp_path / "empty") == []


def test_no_pyplot_state(runs, tmp_path):
    had_pyplot = "matplotlib.pyplot" in sys.modules
    write_figures(runs, tmp_path, baseline="torchscript")
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot
    assert (tmp_path / "ratio_to_torchscript.png").exists()
