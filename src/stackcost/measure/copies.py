"""Host-to-device copies of one batch: bytes and time, from pageable and from pinned memory.

The abstraction-cost study timed the copy of each batch to the GPU (25.2 MB in 15.2 ms
against 12.6 MB in 7.6 ms) and saw pinning halve it again. Here the cell's own inputs
are copied as a user's loop would copy them: from ordinary (pageable) host tensors, which
the driver stages through a pinned buffer of its own, and from page-locked ones, which
the copy engine reads directly. Each copy is timed by CUDA events on the current stream,
`iters` times after one untimed copy; the median is kept. Exercised only on a GPU.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

# Enough copies for a stable median; at 25 MB and ~25 GB/s each takes about 1 ms.
COPY_ITERS = 20


class HostCopies(BaseModel):
    """One batch's inputs copied host -> device."""

    bytes: int
    pageable_ms: float  # median over `iters` copies from pageable host memory
    pinned_ms: float  # the same tensors, page-locked (Tensor.pin_memory())
    iters: int
    device: str  # the GPU's name

    @property
    def pageable_gbs(self) -> float:
        return self.bytes / (self.pageable_ms / 1e3) / 1e9 if self.pageable_ms > 0 else 0.0

    @property
    def pinned_gbs(self) -> float:
        return self.bytes / (self.pinned_ms / 1e3) / 1e9 if self.pinned_ms > 0 else 0.0


def host_to_device(tensors: Sequence[Any], iters: int = COPY_ITERS) -> HostCopies | None:
    """The copy of `tensors` (host tensors: one batch's inputs) to the GPU, pageable and
    pinned; None where CUDA is not available or there is nothing to copy."""
    import torch

    if iters < 1:
        raise ValueError(f"iters must be at least 1, not {iters}")
    host = [t.detach().cpu() for t in tensors if isinstance(t, torch.Tensor)]
    if not host or not torch.cuda.is_available():
        return None
    from stackcost.measure.timer import CudaTimer

    pinned = [t.pin_memory() for t in host]
    median_ms: dict[bool, float] = {}
    for is_pinned, source in ((False, host), (True, pinned)):

        def copy(source: list[Any] = source, is_pinned: bool = is_pinned) -> None:
            # Pinned memory is what makes a non-blocking copy asynchronous; the events
            # still bracket the copy itself on the stream.
            for t in source:
                t.to("cuda", non_blocking=is_pinned)

        copy()  # the first copy pays the allocations
        ns: list[int] = []
        CudaTimer().run(copy, iters, ns)  # the engine's event pair around each copy
        median_ms[is_pinned] = statistics.median(ns) / 1e6
    return HostCopies(
        bytes=sum(int(t.nbytes) for t in host),
        pageable_ms=median_ms[False],
        pinned_ms=median_ms[True],
        iters=iters,
        device=torch.cuda.get_device_name(0),
    )
