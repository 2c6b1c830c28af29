"""Host -> device copies of a batch, pageable and pinned (measure/copies.py)."""

from __future__ import annotations

import pytest
import torch

from stackcost.measure.copies import HostCopies, host_to_device
from stackcost.report.terminal.profile import copies_line


def test_without_cuda_there_is_no_copy_to_time():
    if torch.cuda.is_available():
        pytest.skip("here a GPU takes the copy")
    assert host_to_device([torch.ones(4, 3)]) is None


def test_nothing_to_copy_and_bad_iterations():
    assert host_to_device([]) is None
    with pytest.raises(ValueError, match="iters must be at least 1, not 0"):
        host_to_device([torch.ones(2)], iters=0)


def test_the_line_gives_bytes_times_and_rates():
    h = HostCopies(bytes=25_200_000, pageable_ms=15.2, pinned_ms=7.6, iters=20, device="X")
    line = copies_line(h)
    assert "25.2 MB" in line and "pageable 15.2 ms (1.66 GB/s)" in line
    assert "pinned 7.6 ms (3.32 GB/s)" in line and "median of 20" in line


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_a_batch_copied_to_the_gpu_is_timed_both_ways():
    batch = [torch.randn(32, 3, 224, 224)]  # 19.3 MB, as a resnet50 b32 cell copies
    h = host_to_device(batch, iters=5)
    assert h is not None and h.bytes == 32 * 3 * 224 * 224 * 4
    assert h.pageable_ms > 0 and h.pinned_ms > 0 and h.iters == 5
    assert 0.1 < h.pinned_gbs < 1000 and 0.1 < h.pageable_gbs < 1000  # GB/s, not bytes/ms
