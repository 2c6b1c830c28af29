"""The backend contract: one rung of the ladder.

A backend says whether it can run here (`available`, with a reason when not), what it
can do (`capabilities`), and turns a model plus an example input into a zero-argument
step (`prepare`). Everything else (timing, verification, memory) lives in the engine,
so a backend module reads top to bottom in a minute.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # torch is imported only inside worker processes
    import torch

    from stackcost.cell import Cell


@dataclass(frozen=True)
class Capabilities:
    modes: frozenset[str] = frozenset({"infer"})
    devices: frozenset[str] = frozenset({"cpu"})
    precisions: frozenset[str] = frozenset({"fp32"})

    def why_not(self, cell: Cell) -> str | None:
        """The reason this backend cannot run `cell`, or None when it can."""
        for axis, value, allowed in (
            ("mode", cell.mode, self.modes),
            ("device", cell.device, self.devices),
            ("precision", cell.precision, self.precisions),
        ):
            if value not in allowed:
                if axis == "mode" and value == "train":
                    return f"cannot train: inference only (modes: {', '.join(sorted(allowed))})"
                return f"{axis} {value} not supported (supported: {', '.join(sorted(allowed))})"
        return None


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""

    @classmethod
    def needs_modules(cls, *modules: str, install: str) -> Availability:
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            return cls(False, f"{', '.join(missing)} not installed: {install}")
        return cls(True)


@dataclass
class Prepared:
    """What `prepare` hands back to the engine."""

    step: Callable[[], Any]  # one forward (or train step) on the already-placed input
    details: dict[str, Any] = field(default_factory=dict)  # variant, options: recorded
    # --profile: where one step's time goes, by the backend's own profiler (ONNX Runtime's).
    # None: a torch-based step is profiled with torch.profiler by the engine.
    breakdown: Callable[[int], Any] | None = None


@dataclass
class TrainPrepared(Prepared):
    """What `prepare_train` hands back: `step(x, y)` runs forward, backward and the
    optimizer step and returns the loss tensor; `evaluate(x)` returns logits (no grad)."""

    evaluate: Callable[[Any], Any] | None = None


# Builds the optimizer for a backend's parameters (they may be a scripted module's).
OptimizerFactory = Callable[[Any], "torch.optim.Optimizer"]


@dataclass
class PrepareContext:
    """Where a backend may put artifacts (exported ONNX files, compiled packages)."""

    workdir: Path


class Backend(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    # Option names this backend reads from cell.backend_options, with their defaults.
    options: ClassVar[dict[str, str]] = {}
    # Whether torch.profiler sees this backend's work (its kernels are aten ops). A backend
    # that runs elsewhere supplies Prepared.breakdown, or gets no breakdown with a note.
    torch_profiled: ClassVar[bool] = True

    def available(self) -> Availability:
        return Availability(True)

    @abstractmethod
    def prepare(
        self, model: torch.nn.Module, example: torch.Tensor, cell: Cell, ctx: PrepareContext
    ) -> Prepared:
        """Build the step. `model` is in eval mode, on the cell's device and precision."""

    def prepare_train(
        self,
        model: torch.nn.Module,
        optimizer_factory: OptimizerFactory,
        loss_fn: Callable[[Any, Any], Any],
        example: torch.Tensor,
        cell: Cell,
        ctx: PrepareContext,
    ) -> TrainPrepared:
        """Build the training step. `model` is in train mode, on the cell's device.

        Only backends whose capabilities.modes contain "train" override this.
        """
        raise NotImplementedError(f"cannot train: {self.name} is inference only")

    def option(self, cell: Cell, key: str) -> str:
        return cell.backend_options.get(key, self.options[key])

    def check_options(self, given: dict[str, str]) -> str | None:
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            allowed = ", ".join(sorted(self.options)) or "none"
            return f"unknown option {unknown[0]!r} for backend {self.name} (allowed: {allowed})"
        return None
