"""The train table's GPU column: each batch's copy to the device, pinned or pageable."""

from __future__ import annotations

from stackcost.report.terminal.train import _copy
from stackcost.result import EpochRecord


def _epoch(ms: float, pinned: bool | None, device: str = "cuda") -> EpochRecord:
    return EpochRecord(
        epoch=1, steps=10, train_samples=640, train_loss=1.0, train_accuracy=0.5, epoch_s=1.0,
        train_s=1.0, loader_wait_s=0.1, step_s=0.5, train_samples_per_s=640.0,
        copy_bytes_per_batch=25_200_000, copy_ms_per_batch=ms, copy_device=device,
        copy_pinned=pinned,
    )  # fmt: skip


def test_the_copy_is_the_median_over_epochs_with_its_memory():
    cell = _copy([_epoch(15.2, False), _epoch(7.0, False), _epoch(16.0, False)])
    assert cell.plain == "15.2 ms\n25.2 MB pageable"
    assert _copy([_epoch(7.6, True)]).plain == "7.6 ms\n25.2 MB pinned"


def test_a_cpu_cell_copies_nothing_to_a_gpu():
    assert _copy([_epoch(0.01, None, device="cpu")]).plain == "—"
    assert _copy([]).plain == "—"
