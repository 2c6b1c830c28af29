"""Sweep specs in YAML: validated, with errors that point at the key and its line.

models: [resnet18, {name: mnist-cnn, init: kaiming-normal}]
backends: [eager, onnxruntime]
batch_sizes: 1..64x2          # or [1, 8, 64], or "1,8,64"
resolutions: [32, 64, 128, 224]   # or seq_lens: / samples: for sequence and audio models
repeats: 3
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from stackcost import zoo
from stackcost.axes import COUNT_AXES
from stackcost.backends import REGISTRY, check_name
from stackcost.clip import middle, one_line, shown
from stackcost.env import cores
from stackcost.errors import SpecError
from stackcost.measure.protocol import Protocol
from stackcost.runspec.grammar import parse_config, parse_positive_ints, parse_scenarios
from stackcost.runspec.reader import load_mapping
from stackcost.runspec.run import model_ref, validate
from stackcost.scenarios.settings import TIMED_LOOP, LoadGenSettings
from stackcost.workload import SIZE_AXES

IntAxis = list[int] | int | str  # a list, one value, or "1,8" / "8..1024x2" text


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    init: str = "torch-default"
    num_classes: int | None = None
    in_channels: int | None = None
    conv_bias: bool = False
    input_shape: list[int] | None = None
    seed: int = 0
    config: dict[str, int | float | bool | str] = Field(default_factory=dict)  # Hugging Face
    head: str | None = None


class SweepFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: list[ModelEntry] = Field(min_length=1)
    backends: list[str] | Literal["all"] = Field("all", min_length=1)
    modes: list[str] = Field(default_factory=lambda: ["infer"], min_length=1)
    batch_sizes: IntAxis = 1
    resolutions: IntAxis | None = None
    seq_lens: IntAxis | None = None
    samples: IntAxis | None = None
    prompt_lens: IntAxis | None = None  # generate: prompt length in tokens
    new_tokens: IntAxis | None = None  # generate: tokens generated after the prompt
    precisions: list[str] = Field(default_factory=lambda: ["fp32"], min_length=1)
    threads: IntAxis = Field(default_factory=cores)  # all CPUs this process may use
    devices: list[str] = Field(default_factory=lambda: ["cpu"], min_length=1)
    repeats: int = Field(3, ge=1)
    timeout_s: float = Field(600.0, gt=0)
    protocol: Protocol = Field(default_factory=Protocol)
    tolerance: dict[str, float] = Field(default_factory=dict)
    backend_options: dict[str, dict[str, str]] = Field(default_factory=dict)
    find_max_batch: bool = False
    max_batch: int = Field(1024, ge=1)
    profile: bool = False
    sample_interval_ms: float = Field(10.0, gt=0)
    inherit_env: list[str] = Field(default_factory=list)  # passed to workers, recorded
    # The timed loop and/or MLPerf LoadGen scenarios, and LoadGen's knobs (stackcost.scenarios).
    scenarios: list[str] | str = Field(default_factory=lambda: [TIMED_LOOP])
    loadgen: LoadGenSettings = Field(default_factory=LoadGenSettings)

    @field_validator("models", mode="before")
    @classmethod
    def _names_are_entries(cls, value: Any) -> Any:
        """`- resnet18` is shorthand for `- {name: resnet18}`."""
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value


def _axis(value: Any, what: str) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, int):
        value = [value]
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    try:
        return parse_positive_ints(value, what)
    except SpecError:
        raise
    except ValueError:  # int() refuses over 4300 digits
        raise SpecError(f"{what} {shown(value, 40)} has a number too large") from None


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None):
    """Parse and validate a sweep file into a RunSpec; SpecError names key and line.

    `overrides` (from command-line flags) replace the file's values; protocol and
    backend options are merged key by key.
    """
    path = Path(path)
    source = middle(str(path))  # what messages start with: a long path would crowd them out
    with one_line_errors():
        data, lines = load_mapping(path, source, "a sweep spec")
        for key, value in (overrides or {}).items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                value = {**data[key], **value}
            data[key] = value
        return sweep_from_data(data, source, lines)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Whatever value a message quotes, it stays one line of at most MAX_MESSAGE characters."""
    try:
        yield
    except SpecError as exc:
        raise SpecError(one_line(str(exc))) from None


def sweep_from_data(data: dict[str, Any], source: str, lines: dict[tuple, int] | None = None):
    """Validate sweep fields (from a file or from flags) into a RunSpec."""
    with one_line_errors():
        return _sweep_from_data(data, source, lines or {})


def _sweep_from_data(data: dict[str, Any], source: str, lines: dict[tuple, int]):
    path = source
    try:
        sweep = SweepFile.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_message(path, lines, exc)) from None

    def at(*key: Any) -> str:
        line = lines.get(key, lines.get(key[:1]))
        return f"{path}:{line}" if line else path

    models = []
    for i, entry in enumerate(sweep.models):
        fields = entry.model_dump()
        shape = fields.pop("input_shape", None)
        try:
            if fields["config"]:
                fields["config"] = parse_config(
                    [f"{k}={json.dumps(v)}" for k, v in fields["config"].items()]
                )
            models.append(model_ref(**fields, input_shape=tuple(shape) if shape else None))
        except SpecError as exc:
            raise SpecError(f"{at('models', i)}: models[{i}]: {exc}") from None
    backends = list(REGISTRY) if sweep.backends == "all" else sweep.backends
    for i, name in enumerate(backends):
        try:
            check_name(name)
        except SpecError as exc:
            raise SpecError(f"{at('backends', i)}: backends[{i}]: {exc}") from None
    axes = {}
    for key, what in (
        ("batch_sizes", "batch size"),
        *((a.plural, a.name) for a in COUNT_AXES),
        *((a.plural, a.name.replace("_", " ")) for a in SIZE_AXES.values()),
    ):
        try:
            axes[key] = _axis(getattr(sweep, key), what)
        except SpecError as exc:
            raise SpecError(f"{at(key)}: {key}: {exc}") from None
    sizes = {a.name: axes[a.plural] for a in SIZE_AXES.values() if axes[a.plural]}
    for model in models:
        for axis, values in sizes.items():
            if model.is_hf or model.is_factory or axis not in zoo.model_info(model.name).sizes:
                continue  # checked with the learned workloads, or not this model's axis
            for value in values:
                problem = zoo.model_info(model.name).size_problem(axis, value)
                if problem:
                    key = SIZE_AXES[axis].plural
                    raise SpecError(f"{at(key)}: {key}: {problem}")
    fields = {
        **sweep.model_dump(exclude={"models", "backends", *axes}),
        "batch_sizes": axes["batch_sizes"],
        **{a.plural: axes[a.plural] for a in COUNT_AXES},
        "sizes": sizes,
        "models": models,
        "backends": backends,
    }
    if not fields["tolerance"]:
        fields.pop("tolerance")
    if isinstance(sweep.scenarios, str):  # "single-stream,server" as on the command line
        try:
            fields["scenarios"] = parse_scenarios(sweep.scenarios)
        except SpecError as exc:
            raise SpecError(f"{at('scenarios')}: scenarios: {exc}") from None
    try:
        return validate(fields)
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None


def _message(path: str, lines: dict[tuple, int], exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = tuple(
        p
        for p in err["loc"]
        if not (
            isinstance(p, str)
            and (
                "[" in p
                or p
                in (
                    "str",
                    "int",
                    "list",
                    "literal",
                    "ModelEntry",
                    "bool",
                    "float",
                    "function-after",
                )
            )
        )
    )
    key = ".".join(str(p) for p in loc)
    where = _where_loc(path, lines, loc)
    if err["type"] == "extra_forbidden":
        parent = SweepFile
        if loc[:1] == ("protocol",):
            parent = Protocol  # type: ignore[assignment]
        elif loc[:1] == ("models",):
            parent = ModelEntry  # type: ignore[assignment]
        allowed = ", ".join(parent.model_fields)
        return f"{where}: unknown key {shown(loc[-1], 40)} (allowed: {allowed})"
    if err["type"] == "missing":
        return f"{where}: missing required key {key!r}"
    if err["type"] == "too_short":
        return f"{where}: {key} must not be empty"
    # The input can be a whole (expanded) list: shown clipped.
    return f"{where}: {key} = {shown(err.get('input'))}: {one_line(err['msg'], 80)}"


def _where_loc(path: str, lines: dict[tuple, int], loc: tuple) -> str:
    while loc and loc not in lines:
        loc = loc[:-1]
    return f"{path}:{lines.get(loc, 1)}" if lines else path
