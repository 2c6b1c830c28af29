"""The backend contract: one rung of the ladder.

A backend says whether it can run here (`available`, with a reason when not), what it
can do (`capabilities`, `why_not`), and turns a model plus an example input into a
zero-argument step (`prepare`). Everything else (timing, verification, memory) lives in
the engine, so a backend module reads top to bottom in a minute.

Every rung goes through the same four hooks, whatever runs its step, so no caller asks
which kind of backend it holds:

- `environment(cell)`: variables its framework must find set before it is imported
  (thread pools, flags); the executor puts them in the worker's environment.
- `run_repetition(...)`: one repetition's measurement. By default in this process:
  `prepare`, then the protocol's timed loop. A native rung runs a C++ program instead.
- `breakdown(run, cell, iters)`: where one step's time goes (--profile). By default
  torch.profiler over the prepared step; a backend with its own profiler overrides it.
- `build(cache_dir)`: `stackcost build` compiles what the backend needs ahead of time;
  nothing by default.

Scenarios (stackcost.scenarios) ask for the step in the form they drive: the timed loop
runs `run_repetition`; a LoadGen scenario asks `prepare_instances(..., count)` for its
parallel instances (by default, `prepare` count times); training asks `train_repetition`
whether the backend's own program runs the whole loop (the native rungs) and otherwise
drives `prepare_train`'s step itself.
"""

from __future__ import annotations

import importlib.util
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from stackcost.axes import CUDA_ONLY, QUANTIZED
from stackcost.clip import shown

if TYPE_CHECKING:  # torch is imported only inside worker processes
    import torch

    from stackcost.backends.artifacts import ArtifactCache
    from stackcost.cell import Cell, TrainConfig
    from stackcost.data.splits import Split
    from stackcost.measure.counters import Window
    from stackcost.measure.protocol import Measurement, Protocol
    from stackcost.profile.breakdown import Breakdown
    from stackcost.quantize import Calibration
    from stackcost.result import EpochRecord, Memory
    from stackcost.workload import Example


class Unsupported(Exception):  # noqa: N818 - the cell's status is its name
    """This backend cannot run this cell (e.g. no C++ definition of its model): the worker
    records the cell as `unsupported` with the message as its reason, not as a failure."""


class NoBreakdown(Exception):  # noqa: N818 - read as "no breakdown: <why>"
    """--profile: this repetition has no breakdown; the message says why (a profile note)."""


@dataclass(frozen=True)
class Capabilities:
    modes: frozenset[str] = frozenset({"infer"})
    devices: frozenset[str] = frozenset({"cpu"})
    precisions: frozenset[str] = frozenset({"fp32"})
    # Why a precision is not supported, where the rung knows better than "not supported"
    # (eager's static int8); read in the parent, before any worker starts.
    precision_reasons: tuple[tuple[str, str], ...] = ()

    def why_not(self, cell: Cell) -> str | None:
        """The reason this backend cannot run `cell`, or None when it can."""
        for axis, value, allowed in (
            ("mode", cell.mode, self.modes),
            ("device", cell.device, self.devices),
            ("precision", cell.precision, self.precisions),
        ):
            if axis == "device" and value != "cpu" and cell.precision in QUANTIZED:
                return f"precision {cell.precision} is wired for the CPU only (device {value})"
            if axis == "device" and value != "cuda" and cell.precision in CUDA_ONLY:
                return f"precision {cell.precision}: {CUDA_ONLY[cell.precision]}"
            if value not in allowed:
                if axis == "mode" and value == "train":
                    return f"cannot train: inference only (modes: {', '.join(sorted(allowed))})"
                if axis == "precision" and value in dict(self.precision_reasons):
                    return f"precision {value}: {dict(self.precision_reasons)[value]}"
                if axis == "precision" and value in QUANTIZED:
                    return (
                        f"precision {value}: no quantization path on this rung "
                        f"(supported: {', '.join(sorted(allowed))})"
                    )
                return f"{axis} {value} not supported (supported: {', '.join(sorted(allowed))})"
        return None


def why_not(caps: Capabilities, generate: Capabilities | None, cell: Cell) -> str | None:
    """A cell's reason not to run on a rung: a generate cell by its generator's
    capabilities, any other by the rung's."""
    if cell.mode != "generate":
        return caps.why_not(cell)
    if generate is None:
        return "does not generate tokens (mode generate: no generator on this rung)"
    return generate.why_not(cell)


@dataclass(frozen=True)
class Option:
    """One option a backend reads from cell.backend_options (`-o BACKEND.KEY=VALUE`): its
    default and the values it takes, checked where the spec is validated, not in a cell.
    Empty `choices`: any value (a custom backend that declares only a default)."""

    default: str
    choices: tuple[str, ...] = ()
    help: str = ""

    def problem(self, backend: str, key: str, value: str) -> str | None:
        if self.choices and value not in self.choices:
            return (
                f"option {backend}.{key}={shown(value)} is not allowed "
                f"(allowed: {', '.join(self.choices)})"
            )
        return None


FLAG = ("true", "false")  # the choices of an on/off option


def as_option(declared: Option | str) -> Option:
    """A declared option; a bare default string (custom backends) takes any value."""
    return declared if isinstance(declared, Option) else Option(default=declared)


@dataclass(frozen=True)
class BackendFacts:
    """What the engine asks of a backend before running it (execute/probe.py asks a user's
    backend in a child process)."""

    ok: bool
    reason: str  # why not available ("" when ok)
    modes: frozenset[str]
    devices: frozenset[str]
    precisions: frozenset[str]
    options_problem: str | None = None
    precision_reasons: tuple[tuple[str, str], ...] = ()
    generate: Capabilities | None = None  # its generator's; None: it does not generate
    # The backend's own check of a cell (Backend.why_not: a model it has no definition of,
    # a batch it cannot generate at), where the parent loads the backend: stackcost's own
    # rungs. A user's backend is asked in a child: its capabilities alone decide here.
    check: Callable[[Cell], str | None] | None = field(default=None, compare=False, repr=False)

    def why_not(self, cell: Cell) -> str | None:
        """The reason this backend cannot run `cell`, or None when it can."""
        if self.check is not None:
            return self.check(cell)
        caps = Capabilities(self.modes, self.devices, self.precisions, self.precision_reasons)
        return why_not(caps, self.generate, cell)


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
    # What the backend keeps for its own later hooks (e.g. its `breakdown`): not recorded.
    state: dict[str, Any] = field(default_factory=dict)
    # The prepared model run on other inputs of the same shapes (held-out evaluation);
    # None: this rung's step is bound to its one example.
    infer: Callable[[Example], Any] | None = None
    # Makes a step's output safe to hold past the next call (the cold call's, verified
    # after the loop), outside the clock; None: every call hands back outputs of its own.
    keep: Callable[[Any], Any] | None = None


@dataclass
class Run:
    """One repetition's measurement, as `run_repetition` hands it to the worker."""

    measurement: Measurement
    prepare_s: float  # to the first call, cold call excluded
    details: dict[str, Any]  # recorded with the result
    # None: the step ran in the worker's process, which measures its own memory.
    memory: Memory | None = None
    prepared: Prepared | None = None  # an in-process step, for the breakdown
    answer: dict[str, Any] | None = None  # a native program's answer, for the breakdown


@dataclass
class TrainRun:
    """One training repetition's measurement: the train scenario's own loop over
    `prepare_train`'s step, or a backend's program that ran every epoch itself."""

    epochs: list[EpochRecord]
    samples_ns: list[int]  # per step, the first (cold) step excluded
    cold_ns: int  # the first step, compile included
    prepare_s: float
    timed_s: float  # every epoch, evaluation included
    details: dict[str, Any]  # what the backend prepared: recorded with the result
    loop: dict[str, Any]  # what the loop recorded (first losses, where it ran)
    memory: Memory
    window: Window  # the loop's edges and CPU counters, for the disturbance check
    diverged: str = ""  # why the loss diverged; "" when every epoch completed


@dataclass
class TrainPrepared(Prepared):
    """What `prepare_train` hands back.

    - `step(x, y)` runs forward, backward and the optimizer step on a placed mini-batch and
      returns the loss (anything `float()` reads) and either the logits (a torch tensor) or,
      for a framework whose own step reports accuracy instead, the number of correct
      predictions (an int);
    - `evaluate(x)` returns the logits of a placed batch as a torch tensor (no grad);
    - `place(x, y)` puts a mini-batch (an Example and a torch label tensor, on the CPU)
      where and how the step reads it: timed as the batch's copy, apart from the step.
      None: torch tensors moved to the cell's device.
    """

    evaluate: Callable[[Any], Any] | None = None
    place: Callable[[Any, Any], tuple[Any, Any]] | None = None


class OptimizerFactory(typing.Protocol):
    """The run's optimizer: called with a torch backend's parameters (they may be a
    scripted module's), it builds the torch optimizer; a backend in another framework
    builds its own from `train` (optimizer, lr, momentum, schedule) and `total_steps`."""

    train: TrainConfig
    total_steps: int  # the steps the learning-rate schedule spans (epochs x batches)

    def __call__(self, params: Any) -> torch.optim.Optimizer: ...


@dataclass
class PrepareContext:
    """Where a backend may put artifacts (exported ONNX files, compiled packages)."""

    workdir: Path
    # The run's artifacts shared by a cell's repetitions (backends/artifacts.py); None:
    # this repetition makes its own, as every repetition did before the cache.
    cache: ArtifactCache | None = None
    weights_digest: str = ""  # the model's weights: part of every artifact's key
    # A quantized precision's calibration inputs (stackcost.quantize); None for float cells.
    calibration: Calibration | None = None
    # ab's bursts (measure/bursts.py): another worker runs between this one's bursts, on
    # the same cores. A thread pool that spins while idle would take them from it.
    paced: bool = False


def instance_context(ctx: PrepareContext, index: int) -> PrepareContext:
    """Parallel instance `index` (> 0): a workdir of its own beside the first instance's,
    everything else (the run's artifact cache, the weights) shared."""
    import dataclasses

    return dataclasses.replace(ctx, workdir=ctx.workdir / f"instance-{index}")


class Backend(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    # The options this backend reads from cell.backend_options, by name: each an Option
    # (default and allowed values), or a bare default that takes any value.
    options: ClassVar[dict[str, Option | str]] = {}
    # Whether torch.profiler sees this backend's work (its kernels are aten ops): read by
    # the default `breakdown` only. A backend whose work runs elsewhere overrides
    # `breakdown` with its own profiler, or sets this False and gets a note instead.
    torch_profiled: ClassVar[bool] = True
    # A test-only knob: a rung that quantizes multiplies every weight scale by it after
    # quantizing, so a test proves a broken quantization comes out `wrong`, never `ok`.
    quantize_scale_error: ClassVar[float] = 1.0
    # The rung's token generator (stackcost.generation), "module:Class", for mode
    # "generate"; None: this rung does not generate. Imported only in workers and checks.
    generator: ClassVar[str | None] = None
    # Code written for a GPU that has not yet run on one (it compiles; without CUDA it is
    # unavailable with the reason): `list backends` says so, and none of its numbers counts
    # as measured until a GPU session has run it and cleared this.
    not_yet_run_on_gpu: ClassVar[bool] = False
    # Whether the step's threads are torch's OpenMP pool, in the worker's own process, so
    # that binding them one per core (OMP_PROC_BIND) pins nothing else: `ab`'s bursts bind
    # them (scenarios/task.py). Not so for a runtime with its own pool (ONNX Runtime,
    # OpenVINO): libgomp binds the main thread too, and the pool it starts later would
    # inherit that one core (ONNX Runtime 3.4x slower, OpenVINO 1.6x, measured here).
    omp_threads: ClassVar[bool] = False

    def available(self) -> Availability:
        return Availability(True)

    def why_not(self, cell: Cell) -> str | None:
        """Why this backend cannot run `cell` (status `unsupported`), or None when it can.
        By default its capabilities decide (a generate cell: its generator's); a backend
        may refuse more (a model it has no definition of). The worker asks before building
        anything."""
        return why_not(self.capabilities, self.generate_capabilities(), cell)

    def generator_class(self) -> Any:
        """The rung's Generator class (stackcost.generation), or None when it does not
        generate. Imports the generator's module, not its runtime."""
        import importlib

        if self.generator is None:
            return None
        module, _, name = self.generator.partition(":")
        return getattr(importlib.import_module(module), name)

    def generate_capabilities(self) -> Capabilities | None:
        """What the rung's generator runs (its class's devices and precisions); None when
        the rung does not generate."""
        cls = self.generator_class()
        if cls is None:
            return None
        return Capabilities(frozenset({"generate"}), cls.devices, cls.precisions)

    def environment(self, cell: Cell) -> dict[str, str]:
        """Variables the worker's environment must hold before any framework is imported
        (thread pools, flags), on top of stackcost's thread settings, which win a clash.
        Recorded with the result (details["thread_env"]). None by default."""
        return {}

    def build(self, cache_dir: Path | None = None) -> Any:
        """`stackcost build`: compile ahead of time what a run would compile on first use;
        returns what was built (stackcost.native.build.Build), or None when the backend
        builds nothing (the default)."""
        return None

    def run_repetition(
        self,
        model: torch.nn.Module,
        example: Example,
        cell: Cell,
        ctx: PrepareContext,
        protocol: Protocol,
        timeout_s: float | None = None,
        profile_iters: int = 0,
    ) -> Run:
        """One repetition: in this process, `prepare` then the protocol's timed loop.

        `profile_iters` > 0 asks for a profiled pass (--profile); an in-process step is
        profiled later by `breakdown`, so the default ignores it, as it does `timeout_s`
        (the executor kills a worker that overruns)."""
        import time

        import torch

        from stackcost.measure.protocol import measure
        from stackcost.measure.timer import timer_for

        t = time.perf_counter()
        prepared = self.prepare(model, example, cell, ctx)
        prepare_s = time.perf_counter() - t
        details = {
            **prepared.details,
            # What the worker actually ran with, next to what the backend set for itself.
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
        }
        m = measure(prepared.step, timer_for(cell.device), protocol, prepared.keep)
        return Run(m, prepare_s, details, prepared=prepared)

    def breakdown(self, run: Run, cell: Cell, iters: int) -> Breakdown:
        """--profile: where one step's time goes, from a profiled pass after the timed loop.
        By default torch.profiler over the prepared step; raises NoBreakdown (the reason
        becomes a profile note) when there is none."""
        if run.prepared is None or not self.torch_profiled:
            raise NoBreakdown(
                f"torch.profiler cannot see {self.name}'s kernels and its own profiler is not wired"
            )
        from stackcost.profile import profile_step

        return profile_step(run.prepared.step, iters=iters, device=cell.device)

    @abstractmethod
    def prepare(
        self, model: torch.nn.Module, example: Example, cell: Cell, ctx: PrepareContext
    ) -> Prepared:
        """Build the step. `model` is in eval mode, on the cell's device and precision."""

    def prepare_instances(
        self,
        model: torch.nn.Module,
        example: Example,
        cell: Cell,
        ctx: PrepareContext,
        count: int,
    ) -> list[Prepared]:
        """`count` independent steps that may run at once, one per thread: the parallel
        instances (sessions, streams, requests) a LoadGen Server or Offline scenario serves
        queries with (`--instances`). By default `prepare` called `count` times, each in a
        workdir of its own (so no instance overwrites an artifact another has loaded); each
        instance uses the cell's threads. A backend with a cheaper way to get concurrent
        instances of one compiled model (e.g. asynchronous infer requests) may override
        this. A backend whose step runs in another program raises NotImplementedError from
        `prepare`, which the worker reports as `unsupported`."""
        return [
            self.prepare(model, example, cell, ctx if i == 0 else instance_context(ctx, i))
            for i in range(count)
        ]

    def prepare_train(
        self,
        model: torch.nn.Module,
        optimizer_factory: OptimizerFactory,
        loss_fn: Callable[[Any, Any], Any],
        example: Example,
        cell: Cell,
        ctx: PrepareContext,
    ) -> TrainPrepared:
        """Build the training step. `model` is in train mode, on the cell's device.

        Only backends whose capabilities.modes contain "train" override this.
        """
        raise NotImplementedError(f"cannot train: {self.name} is inference only")

    def train_repetition(
        self,
        model: torch.nn.Module,
        splits: dict[str, Split],
        cell: Cell,
        ctx: PrepareContext,
        timeout_s: float | None = None,
    ) -> TrainRun | None:
        """A whole training repetition run by the backend itself, or None (the default):
        the train scenario drives `prepare_train`'s step. A backend whose program runs
        every epoch itself (the native rungs) overrides it."""
        return None

    def option(self, cell: Cell, key: str) -> str:
        return cell.backend_options.get(key, as_option(self.options[key]).default)

    def check_options(self, given: dict[str, str]) -> str | None:
        """Why the options `given` cannot run, or None: names the backend reads, values
        among each option's choices. A backend whose options constrain each other extends
        this (and calls it first)."""
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            allowed = ", ".join(sorted(self.options)) or "none"
            return f"unknown option {unknown[0]!r} for backend {self.name} (allowed: {allowed})"
        for key, value in given.items():
            if problem := as_option(self.options[key]).problem(self.name, key, value):
                return problem
        return None
