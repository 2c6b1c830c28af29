"""The GPU benchmarks refuse --device cuda in one line (exit 2) where CUDA is absent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where CUDA is absent")
@pytest.mark.parametrize(
    "script", ["harness_overhead.py", "agreement.py", "roofline.py", "peaks.py"]
)
def test_device_cuda_is_refused_without_cuda(script, tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--device", "cuda", "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{script}: error: --device cuda" in lines[0]
    assert "use --device cpu" in lines[0]
    assert not out.exists()  # nothing measured, nothing written
