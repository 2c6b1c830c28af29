"""The roofline and the share-of-peak table hold a cuda cell to its GPU's peak at the
cell's precision, and a CPU cell to the CPU's, side by side."""

from __future__ import annotations

import dataclasses

import pytest

from stackcost.report.frames import tidy
from stackcost.report.frames.costs import collect
from stackcost.report.html.costs.roofline import peak_table, roofline_figure
from stackcost.report.style import series_colors
from tests.measure.test_gpu_peaks import gpu
from tests.report.costs_fixtures import PEAKS, profiled_runs


@pytest.fixture(scope="module")
def rows_and_colors(tmp_path_factory):
    runs = profiled_runs(tmp_path_factory.mktemp("gpu-roof") / "p.db")
    summ = tidy.summary(runs)
    return collect(runs, summ), series_colors(tidy.series_order(summ))


def on_cuda(row, precision):
    cell = row.cell.model_copy(update={"device": "cuda", "precision": precision})
    return dataclasses.replace(row, cell=cell, peaks=gpu())


def test_a_cuda_cell_against_its_precisions_gpu_peak(rows_and_colors):
    rows, colors = rows_and_colors
    cpu = next(r for r in rows if r.cell.threads == 2 and r.cell.backend == "eager")
    cuda_bf16, cuda_fp32 = on_cuda(cpu, "bf16"), on_cuda(cpu, "fp32")
    table = peak_table([cpu, cuda_bf16, cuda_fp32])
    g = cpu.rep.achieved_gflops
    assert table[0][6:] == ["318", f"{100 * g / PEAKS[2][0]:.1f}", "fp32 GEMM, 2 threads"]
    assert table[1][2] == "bf16" and table[1][-1] == "bf16 matmul, Test GPU"
    assert table[1][7] == f"{100 * g / 800_000:.1f}"
    assert table[2][-1] == "fp32 matmul, Test GPU" and table[2][7] == f"{100 * g / 50_000:.1f}"

    panel = roofline_figure([cpu, cuda_bf16], colors)
    names = [t.name for t in panel.fig.data if t.name.startswith("roof")]
    assert names == [
        "roof, 2 threads: 318 GFLOP/s, 15.9 GB/s",
        "roof, Test GPU (cuda) bf16: 800.0 TFLOP/s, 3,000.0 GB/s",
    ]


def test_a_cuda_cell_without_a_matching_peak_has_none(rows_and_colors):
    rows, colors = rows_and_colors
    cpu = next(r for r in rows if r.cell.threads == 2 and r.cell.backend == "eager")
    quantized = on_cuda(cpu, "int8")
    assert quantized.peak is None and quantized.percent_of_peak is None
    assert peak_table([quantized])[0][6:] == ["—", "—", "—"]
    panel = roofline_figure([quantized], colors)
    assert any("no measured int8 peak on cuda" in n for n in panel.notes)
    no_gpu = dataclasses.replace(
        quantized, cell=quantized.cell.model_copy(update={"precision": "bf16"}), peaks=None
    )
    assert no_gpu.percent_of_peak is None


def test_a_cuda_generate_cell_is_held_to_the_gpus_bandwidth():
    from types import SimpleNamespace

    from stackcost.report.frames.generate import read_ceiling_gbs

    cpu = {"threads": 2, "read_gbs": 12.0, "stream_gbs": 10.0}
    run = SimpleNamespace(env={"peaks": {"2": cpu, "cuda": gpu().model_dump(mode="json")}})
    assert read_ceiling_gbs(run, 2, 1e9) == 12.0
    assert read_ceiling_gbs(run, 2, 1e9, "cuda") == 3_000.0
    assert read_ceiling_gbs(SimpleNamespace(env={"peaks": {"2": cpu}}), 2, 1e9, "cuda") is None
