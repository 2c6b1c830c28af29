"""Bring-your-own model: a "package.module:ATTR" path.

ATTR is either a stackcost `Workload` (the model says what it is fed, any inputs: ids,
masks, several tensors, by name or position) or a zero-argument factory returning an
nn.Module that takes one float tensor of the --input-shape given with it.
Imports torch only when a model is actually built, so paths can be validated cheaply.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stackcost.errors import SpecError
from stackcost.workload import Input, Workload

if TYPE_CHECKING:
    from torch import nn

    from stackcost.cell import ModelRef


class ZooError(ValueError):
    """A model or init scheme that cannot be resolved; the message is one line for the CLI."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_factory(path: str) -> Callable[[], Any]:
    """Resolve "package.module:factory" (the attribute may be dotted) to a callable."""
    module_name, sep, attr_path = path.partition(":")
    if not sep or not module_name or not attr_path or ":" in attr_path:
        raise ZooError(f"model factory {path!r} is not of the form 'package.module:factory'")
    # Console scripts don't put the working directory on sys.path (python -m does);
    # users expect a model file next to them to be importable either way.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    importlib.invalidate_caches()  # the file may have been written since the last import
    try:
        obj: Any = importlib.import_module(module_name)
    except SpecError as exc:  # a Workload it declares is refused (stackcost's own words)
        raise ZooError(f"model {path!r}: {exc}") from None
    except Exception as exc:  # anything the module raises while importing
        raise ZooError(
            f"model factory {path!r}: cannot import {module_name!r} ({_one_line(exc)})"
        ) from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ZooError(f"model factory {path!r}: {module_name!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj) and not isinstance(obj, Workload):
        raise ZooError(
            f"model factory {path!r} is neither callable nor a stackcost Workload "
            f"(got {type(obj).__name__})"
        )
    return obj


def custom_workload(ref: ModelRef) -> Workload:
    """The workload at ref.name: the user's own Workload, or a factory's (see below)."""
    obj = load_factory(ref.name)
    if isinstance(obj, Workload):
        if ref.input_shape is not None:
            raise ZooError(
                f"--input-shape does not apply to {ref.name!r}: its Workload declares its inputs"
            )
        return obj
    return factory_workload(ref, lambda ref, sizes: build_custom(ref.name))


def factory_workload(ref: ModelRef, builder: Any) -> Workload:
    """A zero-argument factory's workload: one float tensor of ref.input_shape, whose last
    dimension is the cell's fixed "resolution" (as factory cells have always been keyed).
    Without an input shape it has no inputs: buildable, but not runnable (probe refuses)."""
    if ref.input_shape is None:
        return Workload(ref.name, "user factory", builder, inputs=(), domain="user")
    side = ref.input_shape[-1]
    return Workload(
        ref.name,
        "user factory",
        builder,
        inputs=(Input("input", ("batch", *ref.input_shape)),),
        sizes={"resolution": side},
        minimum={"resolution": side},
        maximum={"resolution": side},
        domain="user",
        in_channels=ref.input_shape[0],
    )


def build_custom(path: str) -> nn.Module:
    """Call the factory at `path` with no arguments; it must return an nn.Module."""
    from torch import nn

    factory = load_factory(path)
    try:
        model = factory()
    except Exception as exc:
        raise ZooError(f"model factory {path!r} raised {_one_line(exc)}") from exc
    if not isinstance(model, nn.Module):
        raise ZooError(
            f"model factory {path!r} returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model
