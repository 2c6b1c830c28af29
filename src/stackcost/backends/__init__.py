"""Backend registry: names map to import paths so listing them imports no framework."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from stackcost.backends.base import (
    Availability,
    Backend,
    Capabilities,
    PrepareContext,
    Prepared,
    TrainPrepared,
)
from stackcost.clip import shown
from stackcost.env import ENV_NAME
from stackcost.errors import SpecError

if TYPE_CHECKING:
    from stackcost.cell import Cell

# Order is the ladder, top (most Python) to bottom.
REGISTRY: dict[str, str] = {
    "eager": "stackcost.backends.eager:EagerBackend",
    "torchscript": "stackcost.backends.torchscript:TorchScriptBackend",
    "inductor": "stackcost.backends.inductor:InductorBackend",
    "export-aot": "stackcost.backends.export_aot:ExportAOTBackend",
    "onnxruntime": "stackcost.backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "stackcost.backends.openvino:OpenVINOBackend",
    "tf": "stackcost.backends.tf_graph:TFBackend",
    "tf-xla": "stackcost.backends.tf_graph:TFXLABackend",
    "keras": "stackcost.backends.keras_tf:KerasBackend",
    "keras-xla": "stackcost.backends.keras_tf:KerasXLABackend",
    "jax": "stackcost.backends.jax_keras:JaxBackend",
    "torchscript-cpp": "stackcost.backends.native:TorchScriptCppBackend",
    "libtorch": "stackcost.backends.native:LibTorchBackend",
    "onednn": "stackcost.backends.native:OneDNNBackend",
    "cudnn": "stackcost.backends.cudnn:CUDNNBackend",
    "llama.cpp": "stackcost.backends.llamacpp:LlamaCppBackend",
}

# The rung every other is verified against and every ratio is taken to.
BASELINE = "eager"


def is_import_path(name: str) -> bool:
    return ":" in name


def check_name(name: str) -> None:
    """Refuse a backend name that is neither registered nor a 'module:Class' path."""
    if name not in REGISTRY and not is_import_path(name):
        raise SpecError(
            f"unknown backend {shown(name)} (allowed: {', '.join(REGISTRY)}, or module:Class)"
        )


def load_backend(name: str) -> Backend:
    """A registered backend by name, or any Backend subclass given as 'module:Class'."""
    path = REGISTRY.get(name, name if is_import_path(name) else None)
    if path is None:
        raise KeyError(name)
    module_name, _, attr = path.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"{path} is not a stackcost Backend subclass")
    return cls()


def omp_bindable(cell: Cell) -> bool:
    """Whether binding the cell's threads one per core is safe and means something: more
    than one thread, on the CPU, of a rung whose step runs on torch's OpenMP pool
    (Backend.omp_threads). A user's backend is not imported here: never bound."""
    if is_import_path(cell.backend) or cell.threads < 2 or cell.device != "cpu":
        return False
    return load_backend(cell.backend).omp_threads


def environment_of(cell: Cell) -> dict[str, str]:
    """What the cell's backend wants set before its framework is imported
    (Backend.environment). A user's backend ('module:Class') is not imported in this
    process, so it asks for nothing here."""
    if is_import_path(cell.backend):
        return {}
    env = load_backend(cell.backend).environment(cell)
    bad = [k for k, v in env.items() if not ENV_NAME.fullmatch(k) or not isinstance(v, str)]
    if bad:
        raise ValueError(f"{cell.backend}.environment(): {bad[0]!r} is not NAME=str")
    return dict(env)


__all__ = [
    "environment_of",
    "omp_bindable",
    "BASELINE",
    "REGISTRY",
    "Availability",
    "Backend",
    "Capabilities",
    "PrepareContext",
    "Prepared",
    "TrainPrepared",
    "check_name",
    "is_import_path",
    "load_backend",
]
