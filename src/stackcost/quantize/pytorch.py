"""The PyTorch rungs' quantized precisions, with torchao.

Two of torchao's paths, each where it is the real one:
- PT2E (`torchao.quantization.pt2e`, X86InductorQuantizer) for int8 and int8-dyn on the
  compiled rungs (inductor, export-aot): the exported graph gets quantize/dequantize pairs
  around every convolution and linear, and Inductor fuses each into a oneDNN int8 kernel.
  In eager those pairs would run as fp32 reference decompositions, so eager has no static
  int8 (`EAGER_PATHS`). torchao's guide for the config: reduce_range (7-bit activations)
  "on earlier CPUs without VNNI", where oneDNN's u8s8 dot product can saturate
  (`reduce_range`, read for the ISA oneDNN runs).
- `quantize_` (tensor subclasses on nn.Linear weights) for w8, w4 and, in eager, int8-dyn:
  torchao's eager-mode API. It quantizes Linear layers only: a CNN's convolutions stay
  float, and the record counts them.

`torch.ao.quantization`'s eager API is deprecated and not used.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stackcost.env import vnni
from stackcost.quantize import Calibration, Ops, QuantRecord, quiet

if TYPE_CHECKING:
    import torch

    from stackcost.workload import Example

GROUP_SIZE = 32  # w4's group: torchao's and ONNX Runtime's MatMulNBits' common block
# Which path each precision takes on each kind of rung ("pt2e" or "quantize_").
COMPILED_PATHS = {"int8": "pt2e", "int8-dyn": "pt2e", "w8": "quantize_", "w4": "quantize_"}
EAGER_PATHS = {"int8-dyn": "quantize_", "w8": "quantize_", "w4": "quantize_"}
EAGER_NO_INT8 = (
    "torchao's static int8 is PT2E, lowered by Inductor; in eager its quantize/dequantize "
    "pairs run as fp32 reference ops, not int8 kernels (use inductor or export-aot)"
)
# The rungs' `reduce_range` option: auto follows torchao's guide for the ISA.
REDUCE_RANGE = ("auto", "true", "false")
# The weighted ops a record counts, by their aten name in a PT2E graph.
_GRAPH_OPS = ("conv1d", "conv2d", "conv3d", "linear", "matmul", "bmm", "addmm", "mm")


def reduce_range(
    requested: str, cpu_flags: Sequence[str], onednn_cap: str | None
) -> tuple[bool, str]:
    """Whether PT2E's activations are quantized to 7 bits, and why: `requested` unless it is
    `auto`, which follows torchao's guide for the ISA oneDNN runs (the CPU's `cpu_flags`,
    capped by ONEDNN_MAX_CPU_ISA=`onednn_cap`, which PyTorch's oneDNN obeys)."""
    if requested not in REDUCE_RANGE:
        raise ValueError(f"reduce_range {requested!r}: use one of {REDUCE_RANGE}")
    if requested != "auto":
        return requested == "true", f"reduce_range={requested}: asked for (-o RUNG.reduce_range)"
    if found := vnni(cpu_flags, onednn_cap):
        return False, (
            f"auto: oneDNN may use {', '.join(found)}, which does not saturate: "
            "full-range uint8 activations (torchao's default)"
        )
    capped = f" (ONEDNN_MAX_CPU_ISA={onednn_cap})" if onednn_cap else ""
    return True, (
        f"auto: no VNNI for oneDNN{capped}, whose u8s8 dot product can saturate; torchao's "
        "guide: reduce_range=True (7-bit activations) on CPUs without VNNI"
    )


def quantize(
    model: torch.nn.Module,
    example: Example,
    precision: str,
    path: str,
    calibration: Calibration | None,
    scale_error: float = 1.0,
    reduce: tuple[bool, str] | None = None,
) -> tuple[torch.nn.Module, QuantRecord]:
    """`model` (fp32, eval) quantized to `precision` by `path`, and what was built.
    `reduce` is `reduce_range`'s answer, for PT2E (None: `auto` for this CPU and process).

    `scale_error` is a test-only knob: every weight scale is multiplied by it after
    quantizing, a deliberately broken quantization that verification must call wrong."""
    import torchao

    from stackcost.env import cpu_info, onednn_cap

    fp32_bytes = _state_bytes(model)
    # torchao's import logs CUDA-only extensions it cannot load; PT2E warns of deprecations.
    with quiet("torchao", "torch._dynamo", "torch.export"):
        if path == "pt2e":
            if reduce is None:
                reduce = reduce_range("auto", cpu_info()["flags"], onednn_cap())
            built, record = _pt2e(model, example, precision, calibration, reduce[0])
            record |= {"scheme": f"reduce_range={reduce[0]}", "scheme_reason": reduce[1]}
        else:
            built, record = _quantize_(model, precision)
        if scale_error != 1.0:
            _scale_weights(built, scale_error)
    tool = f"torchao {torchao.__version__} " + (
        "pt2e X86InductorQuantizer" if path == "pt2e" else "quantize_"
    )
    return built, QuantRecord(
        precision=precision, tool=tool, fp32_weight_bytes=fp32_bytes, **record
    )


def _pt2e(
    model: torch.nn.Module,
    example: Example,
    precision: str,
    calibration: Calibration | None,
    reduce: bool,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    import torch
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    dynamic = precision == "int8-dyn"
    notes = []
    try:
        # strict: the non-strict trace of a module reused in a block (ResNet's one ReLU)
        # gives partitions the quantizer's pattern matcher refuses.
        graph = torch.export.export(model, example.args, example.kwargs, strict=True).module()
    except Exception as error:  # noqa: BLE001 - any strict-trace failure falls back
        notes.append(f"strict export failed ({type(error).__name__}); traced non-strict")
        graph = torch.export.export(model, example.args, example.kwargs).module()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(
        xiq.get_default_x86_inductor_quantization_config(is_dynamic=dynamic, reduce_range=reduce)
    )
    prepared = prepare_pt2e(graph, quantizer)
    # Static: the observers see every calibration batch. Dynamic: one call sets the weight
    # observers; activation scales are computed per call at run time.
    feeds = calibration.examples if calibration and not dynamic else [example]
    with torch.no_grad():
        for batch in feeds:
            batch.call(prepared)
    built = convert_pt2e(prepared)
    return built, {
        "weights": "int8 symmetric per-channel",
        "activations": (
            f"uint8{' (7-bit range)' if reduce else ''} asymmetric per-tensor, "
            + ("dynamic (scales computed per call)" if dynamic else "static (calibrated scales)")
        ),
        "calibration": calibration.record() if calibration and not dynamic else None,
        "ops": _graph_ops(built),
        "weight_bytes": _graph_bytes(built),
        "notes": notes,
    }


def _quantize_(model: torch.nn.Module, precision: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    import copy

    import torch
    from torchao.quantization import (
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        IntxWeightOnlyConfig,
        quantize_,
    )
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_primitives import MappingType

    built = copy.deepcopy(model)
    if precision == "w4":
        # IntxWeightOnlyConfig runs on the CPU in fp32; Int4WeightOnlyConfig's CPU packing
        # needs bf16 activations (and a kernel library this build lacks).
        # Asymmetric, as ONNX Runtime's MatMulNBits and NNCF's INT4_ASYM: 16 levels need the
        # zero point (symmetric put bert-base's pooler 0.43 off fp32, asymmetric 0.28).
        config: Any = IntxWeightOnlyConfig(
            weight_dtype=torch.int4,
            granularity=PerGroup(GROUP_SIZE),
            mapping_type=MappingType.ASYMMETRIC,
        )
        weights, group = f"int4 asymmetric, groups of {GROUP_SIZE}", GROUP_SIZE
    elif precision == "w8":
        config, weights, group = Int8WeightOnlyConfig(), "int8 symmetric per-channel", None
    else:
        config, weights, group = (
            Int8DynamicActivationInt8WeightConfig(),
            "int8 symmetric per-channel",
            None,
        )
    notes = ["quantize_ quantizes nn.Linear only: convolutions stay float"]

    def grouped(module: torch.nn.Module, fqn: str) -> bool:
        # torchao's int4 groups must tile a row: a Linear whose inputs are no multiple of
        # the group stays float (counted), as NNCF and MatMulNBits do no better.
        if not isinstance(module, torch.nn.Linear):
            return False
        if group and module.in_features % group:
            notes.append(f"{fqn}: {module.in_features} inputs, no multiple of {group}: float")
            return False
        return True

    quantize_(built, config, filter_fn=grouped)
    activations = (
        "int8 symmetric per-token, dynamic (scales computed per call)"
        if precision == "int8-dyn"
        else "float (weights dequantized per call)"
    )
    return built, {
        "weights": weights,
        "activations": activations,
        "group_size": group,
        "ops": _module_ops(built),
        "weight_bytes": _state_bytes(built),
        "notes": notes,
    }


def _module_ops(model: torch.nn.Module) -> Ops:
    """Weighted layers by type: quantized when torchao swapped the weight for its tensor
    subclass, float when it is still a plain parameter."""
    import torch

    quantized: Counter[str] = Counter()
    floating: Counter[str] = Counter()
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or list(module.children()):
            continue
        plain = type(weight) in (torch.Tensor, torch.nn.Parameter)
        (floating if plain else quantized)[type(module).__name__] += 1
    return Ops(quantized=dict(quantized), float=dict(floating))


def _graph_ops(graph: torch.fx.GraphModule) -> Ops:
    """Convolutions, linears and matmuls of a PT2E graph: quantized when an operand comes
    out of a dequantize node, float otherwise."""
    quantized: Counter[str] = Counter()
    floating: Counter[str] = Counter()
    for node in graph.graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        if name not in _GRAPH_OPS:
            continue
        fed = [a for a in node.args[:2] if hasattr(a, "target")]
        dequantized = any("dequantize" in str(a.target) for a in fed)
        (quantized if dequantized else floating)[name] += 1
    return Ops(quantized=dict(quantized), float=dict(floating))


def _graph_bytes(graph: torch.fx.GraphModule) -> int:
    """The bytes of the constants the graph reads (int8 weights, scales, float biases);
    the module may still hold fp32 copies the graph no longer uses."""
    total = 0
    for node in graph.graph.nodes:
        if node.op == "get_attr":
            value: Any = graph
            for part in node.target.split("."):
                value = getattr(value, part)
            if hasattr(value, "element_size"):
                total += value.numel() * value.element_size()
    return total


def _state_bytes(model: torch.nn.Module) -> int:
    """The weights as torch.save writes them (tensor subclasses hold int data and scales)."""
    import torch

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def _scale_weights(model: torch.nn.Module, factor: float) -> None:
    """Multiply every weight scale by `factor` (scale_error)."""
    import torch

    if isinstance(model, torch.fx.GraphModule):
        for node in model.graph.nodes:
            if "dequantize_per_channel" in str(node.target) and node.args[1].op == "get_attr":
                scale: Any = model
                for part in node.args[1].target.split("."):
                    scale = getattr(scale, part)
                scale.mul_(factor)
        return
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if weight is not None and hasattr(weight, "scale"):
            weight.scale.mul_(factor)
