"""The workload contract: a model owns its inputs.

A workload says what a model is fed (names, dtypes, and shapes as functions of the batch
and of its own size axes), which size axes it has (`resolution` in px for images,
`seq_len` in tokens for sequences, `samples` for audio) with their defaults, and how to
build the module. Everything here is plain data: the CLI validates and expands a grid
from it without importing torch; the inputs are made in the worker, from the seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from stackcost.clip import shown
from stackcost.errors import SpecError

if TYPE_CHECKING:
    import torch


class ModelFields(Protocol):
    """What a workload reads of the model's reference (cell.ModelRef, which sits above this
    module): the seed its inputs are drawn from, and any field an input's shape names
    ("in_channels"), read by name."""

    @property
    def seed(self) -> int: ...


@dataclass(frozen=True)
class SizeAxis:
    """One size a workload can vary besides the batch: its cell key, unit and spellings."""

    name: str  # the cell's key, the table column ("seq_len")
    unit: str  # "px", "tokens", "samples"
    plural: str  # the spec's key: "seq_lens"
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        """Column heading: 'seq len (tokens)'."""
        return f"{self.name.replace('_', ' ')} ({self.unit})"

    def show(self, value: int) -> str:
        """A value with its unit: '128 tokens'."""
        return f"{value} {self.unit}"


SIZE_AXES: dict[str, SizeAxis] = {
    a.name: a
    for a in (
        SizeAxis("resolution", "px", "resolutions", "image side in pixels"),
        SizeAxis("seq_len", "tokens", "seq_lens", "sequence length in tokens"),
        SizeAxis("samples", "samples", "samples", "audio length in samples"),
        SizeAxis("prompt_len", "tokens", "prompt_lens", "prompt length in tokens (generate)"),
        SizeAxis(
            "new_tokens", "tokens", "new_tokens", "tokens generated after the prompt (generate)"
        ),
    )
}


def size_axis(name: str) -> SizeAxis:
    return SIZE_AXES[name]


def show_sizes(sizes: Mapping[str, int]) -> str:
    """'224 px', '128 tokens', or '' for a workload without size axes."""
    return " · ".join(SIZE_AXES[k].show(v) for k, v in sizes.items())


Kind = Literal["normal", "ids", "mask"]
# What an input may be: its dtypes and how its values are drawn, and the ModelRef fields
# a dimension may name besides "batch" and the workload's own size axes.
DTYPES = ("float32", "int64", "int32", "bool")
KINDS = ("normal", "ids", "mask")
MODEL_DIMS = ("in_channels",)


@dataclass(frozen=True)
class Input:
    """One input tensor. A dimension is an int, "batch", a size axis ("seq_len"), or a
    ModelRef field ("in_channels"); `kind` says how values are drawn from the seed:
    normal N(0, 1) floats, ids uniform in [0, high), mask all ones (every token attended)."""

    name: str
    shape: tuple[int | str, ...]
    dtype: Literal["float32", "int64", "int32", "bool"] = "float32"
    kind: Kind = "normal"
    high: int | None = None  # exclusive upper bound of ids (the vocabulary size)

    def __post_init__(self) -> None:
        """Refused where it is declared (a user's Workload file, as it is imported), not
        as a KeyError in a worker."""
        name = shown(self.name)
        if self.dtype not in DTYPES:
            raise SpecError(
                f"input {name}: dtype {shown(self.dtype)} is not supported (allowed: {', '.join(DTYPES)})"
            )
        if self.kind not in KINDS:
            raise SpecError(
                f"input {name}: kind {shown(self.kind)} is not one of {', '.join(KINDS)}"
            )
        if self.kind == "ids" and not (isinstance(self.high, int) and self.high >= 1):
            raise SpecError(
                f"input {name} draws ids: give high, their exclusive upper bound (the vocabulary "
                f"size), a positive integer (got {shown(self.high)})"
            )
        for d in self.shape:
            if (
                isinstance(d, bool)
                or not isinstance(d, (int, str))
                or (isinstance(d, int) and d < 1)
            ):
                raise SpecError(
                    f"input {name}: dimension {shown(d)} must be a positive integer or the name "
                    f"of a size (batch, a size axis, {', '.join(MODEL_DIMS)})"
                )

    def resolve(self, batch: int, sizes: Mapping[str, int], ref: ModelFields) -> tuple[int, ...]:
        dims = []
        for d in self.shape:
            if isinstance(d, int):
                dims.append(d)
            elif d == "batch":
                dims.append(batch)
            elif d in sizes:
                dims.append(sizes[d])
            else:
                dims.append(int(getattr(ref, d)))
        return tuple(dims)


@dataclass(frozen=True)
class Workload:
    """A model entry: what it is fed, what sizes it has, and how it is built.

    `builder` is "module:function" (imported only in workers) or, for user code, the
    function itself; it is called as builder(ref, sizes) and returns an nn.Module.
    """

    name: str
    description: str
    builder: str | Callable[..., Any]
    inputs: tuple[Input, ...]
    sizes: Mapping[str, int] = field(default_factory=dict)  # defaults; keys = size axes
    minimum: Mapping[str, int] = field(default_factory=dict)
    maximum: Mapping[str, int] = field(default_factory=dict)
    keyword: bool = False  # inputs passed by name: model(**inputs)
    domain: str = "vision"
    num_classes: int = 0  # width of the classification head; 0: none (not trainable)
    in_channels: int = 3
    batch: int = 1  # default batch size
    params: Mapping[str, Any] = field(default_factory=dict)  # fixed builder arguments
    # The architecture family the entry instantiates ("resnet"), shaped by `params` (block,
    # depths). The rungs that re-define models (Keras, the C++ programs) build from these
    # two, so a new depth of a family is one zoo entry. None: nothing re-defines it.
    family: str | None = None
    # How a mixture of experts routes ("num_local_experts=8"), read from its config; None
    # for a dense model. Generate refuses such a decoder before any worker builds it.
    experts: str | None = None

    def __post_init__(self) -> None:
        """Every size axis is one stackcost knows, and every named dimension of an input is
        one the workload declares: refused here, before any run exists."""
        for axis in self.sizes:
            if axis not in SIZE_AXES:
                raise SpecError(
                    f"workload {shown(self.name)}: size axis {shown(axis)} is not one stackcost "
                    f"knows (allowed: {', '.join(SIZE_AXES)})"
                )
        for i in self.inputs:
            for d in i.shape:
                if (
                    isinstance(d, str)
                    and d != "batch"
                    and d not in self.sizes
                    and d not in MODEL_DIMS
                ):
                    declared = ", ".join(["batch", *self.sizes, *MODEL_DIMS])
                    raise SpecError(
                        f"workload {shown(self.name)}: input {shown(i.name)} names dimension "
                        f"{shown(d)}, which it does not declare (declared: {declared}; "
                        "a size axis is declared by giving its default in sizes=)"
                    )

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(self.sizes)

    @property
    def image_input(self) -> Input | None:
        """The one float (batch, C, resolution, resolution) input an image dataset can feed,
        or None: such a model trains on digits, MNIST, CIFAR-10 ...; any other on inputs
        drawn as the workload declares them."""
        if len(self.inputs) != 1:
            return None
        (only,) = self.inputs
        image = only.kind == "normal" and only.dtype == "float32" and len(only.shape) == 4
        return only if image and only.shape[2:] == ("resolution", "resolution") else None

    def size_problem(self, axis: str, value: int) -> str | None:
        """None if the model runs at `value` on `axis`, else a one-line reason."""
        if axis not in self.sizes:
            have = ", ".join(SIZE_AXES[a].flag for a in self.axes) or "none"
            return f"{SIZE_AXES[axis].flag} does not apply to {self.name} (its size axes: {have})"
        unit = SIZE_AXES[axis].unit
        low, high = self.minimum.get(axis, 1), self.maximum.get(axis)
        if value < low:
            return f"{axis} {value} is too small for {self.name} (minimum {low} {unit})"
        if high is not None and value > high:
            return f"{axis} {value} is too large for {self.name} (maximum {high} {unit})"
        return None

    def facts(self) -> dict[str, Any]:
        """What the parent needs (axes, defaults, bounds), as JSON, without the builder."""
        return {
            "name": self.name,
            "description": self.description,
            "inputs": [
                {
                    "name": i.name,
                    "shape": list(i.shape),
                    "dtype": i.dtype,
                    "kind": i.kind,
                    "high": i.high,
                }
                for i in self.inputs
            ],  # fmt: skip
            "sizes": dict(self.sizes),
            "minimum": dict(self.minimum),
            "maximum": dict(self.maximum),
            "keyword": self.keyword,
            "domain": self.domain,
            "num_classes": self.num_classes,
            "in_channels": self.in_channels,
            "batch": self.batch,
            # Only when set: a dense model's facts, and the digest of its spec, stay as they were.
            **({"experts": self.experts} if self.experts else {}),
        }

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any]) -> Workload:
        """The parent's copy of a workload learned in a child (no builder: never built here)."""
        inputs = tuple(
            Input(i["name"], tuple(i["shape"]), i["dtype"], i["kind"], i["high"])
            for i in facts["inputs"]
        )
        return cls(builder="", **{**facts, "inputs": inputs})


# -- the inputs of one call ----------------------------------------------------------------


@dataclass
class Example:
    """The batched inputs of one call, in the workload's order; passed by name or position."""

    names: tuple[str, ...]
    tensors: tuple[Any, ...]
    keyword: bool = False

    @property
    def args(self) -> tuple[Any, ...]:
        return () if self.keyword else self.tensors

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(zip(self.names, self.tensors, strict=True)) if self.keyword else {}

    def named(self) -> dict[str, Any]:
        return dict(zip(self.names, self.tensors, strict=True))

    def call(self, fn: Callable[..., Any]) -> Any:
        return fn(*self.args, **self.kwargs)

    def map(self, f: Callable[[Any], Any]) -> Example:
        return Example(self.names, tuple(f(t) for t in self.tensors), self.keyword)

    def to(self, device: Any) -> Example:
        return self.map(lambda t: t.to(device))

    def cast(self, dtype: torch.dtype) -> Example:
        """Floating inputs in `dtype`; ids and masks keep theirs."""
        return self.map(lambda t: t.to(dtype) if t.is_floating_point() else t)

    @property
    def batch(self) -> int:
        return int(self.tensors[0].shape[0]) if self.tensors else 0

    def record(self) -> dict[str, str]:
        """What was fed, for the record: {"input_ids": "int64[8, 128]"}."""
        return {
            n: f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
            for n, t in zip(self.names, self.tensors, strict=True)
        }

    def nbytes(self) -> int:
        return sum(int(t.nbytes) for t in self.tensors)


_DTYPES = {"float32": "float32", "int64": "int64", "int32": "int32", "bool": "bool"}


def make_example(
    workload: Workload,
    ref: ModelFields,
    batch: int,
    sizes: Mapping[str, int],
    seed: int | None = None,
) -> Example:
    """The inputs of one call, drawn from the model's seed: the same cell, the same values.

    One generator seeded with seed + 1 draws every input in order, so a single float input
    is exactly what stackcost has always fed image models. `seed` replaces the model's
    (synthetic training data draws each split from its own).
    """
    import torch

    generator = torch.Generator().manual_seed(ref.seed + 1 if seed is None else seed)
    tensors = []
    for spec in workload.inputs:
        shape = spec.resolve(batch, sizes, ref)
        dtype = getattr(torch, _DTYPES[spec.dtype])
        if spec.kind == "ids":
            if not spec.high:
                raise ValueError(f"input {spec.name!r} draws ids but has no upper bound (high)")
            t = torch.randint(0, spec.high, shape, generator=generator, dtype=dtype)
        elif spec.kind == "mask":
            t = torch.ones(shape, dtype=dtype)
        else:
            t = torch.randn(shape, generator=generator).to(dtype)
        tensors.append(t)
    return Example(tuple(i.name for i in workload.inputs), tuple(tensors), workload.keyword)
