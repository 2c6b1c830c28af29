"""Backend registry: names map to import paths so listing them imports no framework."""

from __future__ import annotations

import importlib

from stackcost.backends.base import (
    Availability,
    Backend,
    Capabilities,
    PrepareContext,
    Prepared,
    TrainPrepared,
)

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
}


def is_import_path(name: str) -> bool:
    return ":" in name


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


__all__ = [
    "REGISTRY",
    "Availability",
    "Backend",
    "Capabilities",
    "PrepareContext",
    "Prepared",
    "TrainPrepared",
    "is_import_path",
    "load_backend",
]
