"""--profile's FLOP count of a cell whose rung cast the model in place (bf16, fp16)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from stackcost.scenarios import profiling
from stackcost.workload import Example


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_work_counts_a_model_cast_in_place(dtype):
    if dtype == torch.float16:
        try:
            torch.nn.Linear(2, 2).half()(torch.ones(1, 2, dtype=torch.float16))
        except RuntimeError:
            pytest.skip("no fp16 linear on this CPU build")
    model = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    model.to(dtype)  # what eager's prepare does to the module it is handed
    example = Example(("input",), (torch.ones(3, 8),))  # the worker's fp32 inputs
    work, gflops = profiling.work(model, example, SimpleNamespace(mode="infer"),
                                  SimpleNamespace(median_ms=1.0))  # fmt: skip
    assert work.flops == 2 * 3 * 8 * 4
    assert gflops == pytest.approx(192 / 1e-3 / 1e9)
