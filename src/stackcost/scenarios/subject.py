"""What an inference scenario measures: the cell's model and inputs on its device, and
eager fp32's reference outputs for them. The timed loop and LoadGen build the same one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.backends.base import PrepareContext
    from stackcost.cell import Cell
    from stackcost.scenarios.base import Bench, MemoryWatch
    from stackcost.workload import Example


@dataclass(frozen=True)
class Subject:
    model: torch.nn.Module  # eval mode, on the cell's device
    example: Example  # the inputs of one call, placed
    reference: list[Any]  # eager fp32's outputs on the same weights and inputs
    reference_from: str  # "computed", or reused from an earlier repetition
    ctx: PrepareContext  # where the backend puts its artifacts
    memory: MemoryWatch  # peak counted from after the reference forward

    @classmethod
    def build(cls, bench: Bench) -> Subject:
        """Build the model and its inputs, compute (or reuse) the reference, place both on
        the cell's device, and reset the peak memory (the reference is not the backend's)."""
        import torch

        from stackcost import zoo
        from stackcost.backends import PrepareContext
        from stackcost.backends.artifacts import ArtifactCache
        from stackcost.quantize import calibration_set, is_quantized
        from stackcost.workload import make_example

        cell, task, phases = bench.cell, bench.task, bench.phases
        t = time.perf_counter()
        workload = zoo.workload_of(cell.model)
        model = bench.build_model(workload)
        example = make_example(workload, cell.model, cell.batch_size, cell.sizes)
        phases.build_s = time.perf_counter() - t

        cache = ArtifactCache(Path(task.cache_dir)) if task.cache_dir else None
        digest = bench.progress.weights_digest
        t = time.perf_counter()
        reference, reference_from = _reference(model, example, cell, cache, digest)
        phases.reference_s = time.perf_counter() - t

        device = torch.device(cell.device)
        model, example = model.to(device), example.to(device)
        calibration = None
        if is_quantized(cell.precision):
            calibration = calibration_set(workload, cell.model, cell.batch_size, cell.sizes)
        return cls(
            model=model,
            example=example,
            reference=reference,
            reference_from=reference_from,
            memory=bench.watch_memory(),
            ctx=PrepareContext(
                workdir=Path(task.workdir),
                cache=cache,
                weights_digest=digest or "",
                calibration=calibration,
            ),
        )


def _reference(
    model: torch.nn.Module,
    example: Example,
    cell: Cell,
    cache: ArtifactCache | None,
    weights: str | None,
) -> tuple[list[Any], str]:
    """The eager fp32 reference outputs, and where they came from.

    With the run's artifact cache, the cell's first repetition computes them (one eager
    forward: seconds at batch 64 and 224 px) and saves them; later ones load them. The
    key holds the weights' digest and the inputs' bytes, so a reference is only reused
    for the very weights and inputs it was computed on."""
    import hashlib

    import numpy as np
    import torch

    from stackcost.verify import leaves

    def compute() -> list[Any]:
        with torch.inference_mode():
            return leaves(example.call(model))

    if cache is None:
        return compute(), "computed"
    inputs = hashlib.sha1()
    for tensor in example.tensors:
        inputs.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    key = {
        "artifact": "eager-reference",
        "model": cell.model.key_data(),
        "weights": weights,
        "inputs": inputs.hexdigest(),
        "shapes": example.record(),
        "threads": cell.threads,  # a reduction split differently rounds differently
    }
    computed: list[Any] = []

    def make(home: Path) -> dict[str, Any]:
        computed.extend(compute())
        np.savez(home / "reference.npz", *[array for _, array in computed])
        return {"names": [name for name, _ in computed]}

    home, record = cache.reuse_or_make(key, make)
    if computed:
        return computed, "computed"
    with np.load(home / "reference.npz") as saved:
        arrays = [saved[f"arr_{i}"] for i in range(len(record["names"]))]
    return list(zip(record["names"], arrays, strict=True)), "reused from an earlier repetition"
