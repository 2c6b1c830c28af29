"""How much work one call of a model is: FLOPs, and an estimate of its memory traffic.

With the machine's peaks (peaks.py) these place a cell on the roofline: the FLOP count
says how far the measured time is from the compute peak, and FLOPs per byte (the
arithmetic intensity) says which peak, compute or memory bandwidth, bounds it.

FLOPs come from torch's own FlopCounterMode, so they follow the library's formulas (2 per
multiply-add; only matmul- and convolution-like ops count). Bytes come from a small
dispatch mode here: every aten op reads its tensor inputs and writes its tensor outputs
once. That is an estimate, not a measurement: it models no cache reuse (an upper bound
on DRAM traffic for ops whose operands fit in cache) and no extra passes an op's kernel
makes internally (a lower bound for those).

torch is imported inside the functions: the CLI imports this module without paying for it.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import torch

FLOPS_METHOD = (
    "torch.utils.flop_counter.FlopCounterMode over the aten ops of one call "
    "(2 FLOPs per multiply-add; only matmul- and convolution-like ops are counted)"
)
BYTES_METHOD = (
    "ESTIMATED, not measured: each aten op reads its tensor inputs and writes its tensor "
    "outputs once (numel x element size); views and other metadata-only ops count nothing; "
    "no cache reuse is modelled"
)

# Ops that only make a new tensor header over existing storage but whose schema does not
# declare the alias (so `OpOverload.is_view` is False): they move no data either.
_METADATA_ONLY = frozenset({"_unsafe_view", "alias", "lift_fresh", "_reshape_alias"})


class Work(BaseModel):
    """The work of one call (one batch): FLOPs, estimated bytes, and how each was counted."""

    model_config = ConfigDict(frozen=True)

    flops: int
    bytes: int
    by_op: dict[str, int]  # FLOPs per aten op name ("convolution", "addmm", "mm", ...)
    method: str
    bytes_method: str
    mode: str


def arithmetic_intensity(work: Work) -> float:
    """FLOPs per byte of (estimated) traffic: the roofline's x axis."""
    return work.flops / work.bytes if work.bytes else float("inf")


def _traffic_mode() -> Any:
    """A TorchDispatchMode that sums the bytes each aten op reads and writes.

    Built in a function so the class (which subclasses a torch type) needs torch only
    when counting actually happens.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def nbytes(tree: Any) -> int:
        leaves, _ = tree_flatten(tree)
        # Logical size: an expanded (stride-0) input counts its full shape, as an op that
        # iterates over it would read it.
        return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))

    class TrafficMode(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            # A view shares its input's storage: no data moves. In-place and out= ops are
            # counted like any other (they read the operands and write the result).
            if not (func.is_view or func.overloadpacket.__name__ in _METADATA_ONLY):
                self.bytes += nbytes((args, kwargs)) + nbytes(out)
            return out

    return TrafficMode()


def count_work(model: torch.nn.Module, example: Any, mode: str = "infer") -> Work:
    """FLOPs and estimated bytes of one call of `model` on the batch `example` (a tensor,
    or a workload's Example: several inputs, by name or position).

    infer: one forward under no_grad, on the model as given (put it in eval mode first,
    or BatchNorm updates its running stats; the count is the same either way). train: forward, cross-entropy against all-zero
    labels, backward, counted together (an optimizer step is not: its FLOPs are not
    matmuls and would count zero anyway). Training runs on a deep copy, so neither the
    model's weights, grads, BatchNorm running stats nor train/eval flag change.
    """
    import torch
    import torch.nn.functional as F
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    from stackcost.workload import Example

    if mode not in ("infer", "train"):
        raise ValueError(f"mode must be 'infer' or 'train', not {mode!r}")
    if isinstance(example, torch.Tensor):
        example = Example(("input",), (example,))
    counter = FlopCounterMode(display=False)
    traffic = _traffic_mode()
    # Both modes in one pass: the traffic mode, entered last, sees each op first and
    # passes it on to the FLOP counter, so each op is counted once by each.
    if mode == "infer":
        with torch.no_grad(), counter, traffic:
            example.call(model)
    else:
        net = copy.deepcopy(model).train()
        first = example.tensors[0]
        labels = torch.zeros(first.shape[0], dtype=torch.long, device=first.device)
        with counter, traffic:
            # The first output tensor is the logits (a ModelOutput's first field).
            out = next(t for t in tree_leaves(example.call(net)) if isinstance(t, torch.Tensor))
            loss = F.cross_entropy(out.reshape(out.shape[0], -1), labels)
            loss.backward()
    by_op = {op.__name__: int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return Work(
        flops=int(counter.get_total_flops()),
        bytes=int(traffic.bytes),
        by_op=by_op,
        method=FLOPS_METHOD,
        bytes_method=BYTES_METHOD,
        mode=mode,
    )
