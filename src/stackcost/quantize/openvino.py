"""OpenVINO's quantized precisions, built by NNCF on the ov.Model read from the rung's fp32
ONNX graph, and counted back from the model NNCF returns.

- int8: `nncf.quantize` inserts FakeQuantize on activations with scales calibrated on the
  calibration set, and stores weights int8 per channel. Its overflow fix follows OpenVINO's
  saturation guide for the ISA oneDNN will run (`overflow_fix`): without VNNI the int8
  dot product can saturate, and the fix keeps every layer's weights in 7 bits.
- w8 / w4: `nncf.compress_weights` stores weights int8 (per channel) or int4 (in groups);
  activations stay float. The CPU plugin would quantize activations of such MatMuls per
  call by default (DYNAMIC_QUANTIZATION_GROUP_SIZE is 32 in 2026.4), so the compile config
  sets it to 0: weight-only really is weight-only.
- int8-dyn: int8 weights from `compress_weights` and that same per-call quantization of the
  activations, turned on with a nonzero group size. The plugin has it for FullyConnected
  (MatMul) only, so Convolutions are left float; oneDNN's primitive log shows the
  MatMuls' kernels as brgemm avx512_core_vnni with src_dyn_quant_group_size, the
  Convolutions' as f32. It needs VNNI, and the plugin quietly runs float activations
  without it, so `dynamic_quantization_changes` checks the compiled model answers
  differently with it than without.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stackcost.env import vnni
from stackcost.quantize import Ops, QuantRecord

if TYPE_CHECKING:
    import numpy as np
    import openvino as ov

    from stackcost.quantize import Calibration
    from stackcost.workload import Example

# The precisions this module builds.
PRECISIONS = ("int8", "int8-dyn", "w8", "w4")
# The CPU plugin's property for per-call activation quantization in compressed MatMuls.
DYNAMIC_GROUP = "DYNAMIC_QUANTIZATION_GROUP_SIZE"
# int8-dyn's activation groups along the input channels: the plugin's own default.
DYNAMIC_GROUP_SIZE = 32
# w4's weight groups along the input channels.
W4_GROUP_SIZE = 32
# A layer whose input channels are not a multiple of W4_GROUP_SIZE (784 of a flattened 28x28
# image) gets the largest power of two that divides them, down to this, before NNCF falls
# back to its backup precision (int8).
W4_MIN_GROUP_SIZE = 16
# Weight-only modes: NNCF's default INT8_ASYM for w8 (a zero point per channel fits skewed
# weights); INT4_ASYM for w4, whose 16 levels need the zero point more; INT8_SYM for int8-dyn
# (the plugin turns symmetric weights into u8 with zero point 128 for its VNNI kernels).
WEIGHT_MODES = {"w8": "INT8_ASYM", "w4": "INT4_ASYM", "int8-dyn": "INT8_SYM"}

WEIGHTED = ("Convolution", "GroupConvolution", "MatMul", "Gather")
LOW_PRECISION = {"u8": "uint8", "i8": "int8", "u4": "uint4", "i4": "int4"}
FLOATS = ("f32", "f16", "bf16")
# What lies between a stored weight and the op reading it: decompression, layout.
DECOMPRESSION = frozenset(
    {"Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}
)
# What may lie between an activation's FakeQuantize and the op reading it.
LAYOUT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Convert"})


# NNCF's OverflowFix values; "auto" resolves by the ISA (`overflow_fix`).
OVERFLOW_FIXES = ("auto", "enable", "first_layer_only", "disable")


def overflow_fix(
    requested: str, cpu_flags: Sequence[str], onednn_cap: str | None
) -> tuple[str, str]:
    """NNCF's overflow fix for an int8 model, and why: `requested` unless it is `auto`,
    which follows OpenVINO's saturation guide for the ISA oneDNN will use (the CPU's flags,
    capped by ONEDNN_MAX_CPU_ISA=`onednn_cap`, which OpenVINO's CPU plugin obeys)."""
    if requested not in OVERFLOW_FIXES:
        raise ValueError(f"openvino overflow_fix {requested!r}: use one of {OVERFLOW_FIXES}")
    if requested != "auto":
        return requested, f"{requested}: asked for (-o openvino.overflow_fix)"
    if found := vnni(cpu_flags, onednn_cap):
        return "first_layer_only", (
            f"auto: oneDNN may use {', '.join(found)}, which does not saturate; NNCF's "
            "default keeps only the first layer's weights in 7 bits"
        )
    capped = f" (ONEDNN_MAX_CPU_ISA={onednn_cap})" if onednn_cap else ""
    return "enable", (
        f"auto: no VNNI for oneDNN{capped}, so its int8 dot product can saturate; OpenVINO's "
        "saturation guide: 7-bit weights in every layer"
    )


@dataclass(frozen=True)
class Quantized:
    model: ov.Model
    record: QuantRecord
    config: dict[str, Any]  # compile properties the precision needs on top of the rung's


@dataclass(frozen=True)
class _Weight:
    dtype: str  # the stored constant's element type: "u8", "i4", "f32"
    zero_point: bool  # decompressed through a Subtract
    group: int | None  # grouped along the input channels: the group's size
    per_tensor: bool  # one scale for the whole tensor


@dataclass(frozen=True)
class _Op:
    kind: str
    weight: _Weight | None  # None: both inputs are activations
    fake_quantized: bool  # an activation input comes through a FakeQuantize

    @property
    def low_weight(self) -> bool:
        return self.weight is not None and self.weight.dtype in LOW_PRECISION

    @property
    def quantized(self) -> bool:
        return self.low_weight or self.fake_quantized


def quantize_model(
    model: ov.Model,
    precision: str,
    calibration: Calibration | None,
    feed: Callable[[Example], Mapping[str, np.ndarray]],
    fix: tuple[str, str] | None = None,
) -> Quantized:
    """`model` (the fp32 graph, left as it is) quantized to `precision` by NNCF, what was
    built, and the compile config it needs. `feed` turns a calibration example into the
    model's inputs by name; int8 needs `calibration`; `fix` is `overflow_fix`'s answer
    (None: `auto` for this CPU and this process' ONEDNN_MAX_CPU_ISA)."""
    import nncf
    import openvino as ov

    from stackcost.env import cpu_info, onednn_cap

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: openvino builds {', '.join(PRECISIONS)}")
    if fix is None:
        fix = overflow_fix("auto", cpu_info()["flags"], onednn_cap())
    fp32_bytes = constant_bytes(model)
    with _quiet_nncf():
        if precision == "int8":
            built, how = _static_int8(model, calibration, feed, fix[0])
        else:
            built, how = _compressed(model, precision)
    tool = f"nncf {nncf.__version__} {how}; openvino {ov.get_version().split('-')[0]}"

    ops = weighted_ops(built)
    group = DYNAMIC_GROUP_SIZE if precision == "int8-dyn" else 0
    # 0 for every other precision: no op is quantized per call beyond what NNCF built.
    config = {DYNAMIC_GROUP: group}
    if precision == "int8-dyn":
        tool += f" CPU dynamic quantization ({DYNAMIC_GROUP}={group})"
        activations = (
            f"int8, quantized per call by the CPU plugin in groups of {group} input "
            f"channels, MatMul (FullyConnected) only; float elsewhere"
        )
    elif precision == "int8":
        activations = _fake_quant_text(built)
    else:
        activations = f"float ({DYNAMIC_GROUP}=0: the CPU plugin does not quantize them per call)"
    groups = sorted({op.weight.group for op in ops if op.low_weight and op.weight.group})
    record = QuantRecord(
        precision=precision,
        tool=tool,
        weights=_weights_text(ops),
        activations=activations,
        group_size=(groups[-1] if groups else None) if precision == "w4" else None,
        calibration=calibration.record() if precision == "int8" and calibration else None,
        ops=Ops(
            quantized=dict(Counter(op.kind for op in ops if op.quantized)),
            float=dict(Counter(op.kind for op in ops if not op.quantized)),
        ),
        weight_bytes=constant_bytes(built),
        fp32_weight_bytes=fp32_bytes,
        scheme=f"overflow_fix={fix[0]}" if precision == "int8" else None,
        scheme_reason=fix[1] if precision == "int8" else None,
        notes=_notes(ops, precision),
    )
    return Quantized(built, record, config)


def _static_int8(
    model: ov.Model,
    calibration: Calibration | None,
    feed: Callable[[Example], Mapping[str, np.ndarray]],
    fix: str,
) -> tuple[ov.Model, str]:
    """int8 weights and activations by `nncf.quantize`, calibrated on `calibration`; the
    model built and how, for the record."""
    import nncf

    if calibration is None or not calibration.examples:
        raise ValueError("int8 needs calibration inputs (ctx.calibration)")
    # NNCF's guidance: a transformer (attention: a Softmax in the graph) is quantized
    # as ModelType.TRANSFORMER, which keeps its attention-mask and normalization
    # arithmetic float; without it BERT-style graphs fail in bias correction.
    transformer = any(op.get_type_name() == "Softmax" for op in model.get_ops())
    built = nncf.quantize(
        model.clone(),
        nncf.Dataset(calibration.examples, feed),
        preset=nncf.QuantizationPreset.PERFORMANCE,
        **({"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}),
        # NNCF counts dataset items, here batches: every calibration batch is used.
        subset_size=len(calibration.examples),
        advanced_parameters=nncf.AdvancedQuantizationParameters(overflow_fix=nncf.OverflowFix(fix)),
    )
    return built, (
        "quantize (preset performance: symmetric; fast bias correction; "
        f"overflow_fix={fix}{'; model_type transformer' if transformer else ''})"
    )


def _compressed(model: ov.Model, precision: str) -> tuple[ov.Model, str]:
    """Weights of a weight-only precision (w8, w4, int8-dyn) by `nncf.compress_weights`;
    the model built and how, for the record."""
    import nncf

    mode = WEIGHT_MODES[precision]
    options: dict[str, Any] = {}
    if precision == "w4":
        options = {
            "group_size": W4_GROUP_SIZE,
            "ratio": 1.0,
            "advanced_parameters": nncf.AdvancedCompressionParameters(
                group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST,
                min_adjusted_group_size=W4_MIN_GROUP_SIZE,
            ),
        }
    elif precision == "int8-dyn":
        # The plugin quantizes activations per call in FullyConnected only; int8
        # Convolution weights would make them weight-only ops in an int8-dyn cell.
        options = {
            "ignored_scope": nncf.IgnoredScope(
                types=["Convolution", "GroupConvolution"], validate=False
            )
        }
    built = nncf.compress_weights(
        model.clone(), mode=getattr(nncf.CompressWeightsMode, mode), **options
    )
    how = f"compress_weights {mode}"
    if precision == "w4":
        how += f" group_size={W4_GROUP_SIZE} ratio=1.0"
    return built, how


def dynamic_quantization_changes(
    model: ov.Model, config: Mapping[str, Any], inputs: Mapping[str, np.ndarray]
) -> float:
    """The largest difference between `model`'s first output compiled with `config` and
    with DYNAMIC_QUANTIZATION_GROUP_SIZE=0: 0.0 means the plugin quantized no activation
    per call (no VNNI, no MatMul it takes, or no f32 inference precision in `config`: on
    AMX the plugin's default is bf16), the same kernels ran both times."""
    import numpy as np
    import openvino as ov

    core = ov.Core()
    outputs = [
        core.compile_model(model, "CPU", {**config, DYNAMIC_GROUP: group})(dict(inputs))[0]
        for group in (config[DYNAMIC_GROUP], 0)
    ]
    return float(np.max(np.abs(outputs[0] - outputs[1])))


def constant_bytes(model: ov.Model) -> int:
    """The bytes of every Constant in `model`: its weights as stored (int4 packed two a byte)."""
    return sum(op.get_byte_size() for op in model.get_ordered_ops() if _type(op) == "Constant")


def weighted_ops(model: ov.Model) -> list[_Op]:
    """Convolutions, MatMuls and embedding Gathers of `model`, each with its weight (the
    constant behind its decompression) and whether an activation comes quantized."""
    found = []
    for node in model.get_ordered_ops():
        kind = _type(node)
        if kind not in WEIGHTED:
            continue
        sources = [i.get_source_output().get_node() for i in node.inputs()]
        if kind == "Gather":
            weight = _weight(sources[0])
            # An embedding table: a float or low-precision matrix (not a shape's indices).
            if weight is None or weight.dtype not in (*LOW_PRECISION, *FLOATS):
                continue
            found.append(_Op(kind, weight, False))
            continue
        weights = [_weight(s) for s in sources[:2]]
        weight = next((w for w in weights if w is not None), None)
        activations = [s for s, w in zip(sources[:2], weights, strict=True) if w is None]
        found.append(_Op(kind, weight, any(_fake_quantized(a) for a in activations)))
    return found


def _type(node: Any) -> str:
    return str(node.get_type_name())


def _weight(node: Any) -> _Weight | None:
    """The weight `node` delivers: the constants reached through decompression ops only.
    None when an activation flows in (a Parameter or any computing op upstream)."""
    stack, constants, zero_point, reshaped = [node], [], False, False
    while stack:
        n = stack.pop()
        kind = _type(n)
        if kind == "Constant":
            constants.append(n)
            continue
        if kind not in DECOMPRESSION:
            return None
        zero_point |= kind == "Subtract"
        reshaped |= kind == "Reshape"
        stack.extend(i.get_source_output().get_node() for i in n.inputs())
    if not constants:
        return None
    low = [c for c in constants if c.get_element_type().get_type_name() in LOW_PRECISION]
    stored = max(low or constants, key=lambda c: math.prod(c.get_output_shape(0)))
    shape = list(stored.get_output_shape(0))
    scales = [c for c in constants if c is not stored and c.get_element_type().is_real()]
    # int4 groups are stored [out, groups, group] and reshaped to the op's 2-D weight.
    grouped = bool(low) and reshaped and len(shape) == 3
    return _Weight(
        dtype=stored.get_element_type().get_type_name(),
        zero_point=zero_point,
        group=shape[-1] if grouped else None,
        per_tensor=bool(low) and all(math.prod(s.get_output_shape(0)) == 1 for s in scales),
    )


def _fake_quantized(node: Any) -> bool:
    while _type(node) in LAYOUT:
        node = node.input(0).get_source_output().get_node()
    return _type(node) == "FakeQuantize"


def _scheme(w: _Weight) -> str:
    granularity = (
        f"groups of {w.group}" if w.group else "per-tensor" if w.per_tensor else "per-channel"
    )
    symmetry = "asymmetric" if w.zero_point else "symmetric"
    return f"{LOW_PRECISION[w.dtype]} {symmetry} {granularity}"


def _weights_text(ops: list[_Op]) -> str:
    """Each weight scheme found, with the ops stored in it: "uint4 asymmetric groups of 32:
    1 MatMul; uint8 asymmetric per-channel: 2 Convolution, 1 MatMul"."""
    by_scheme: dict[str, Counter[str]] = {}
    for op in ops:
        if op.low_weight:
            assert op.weight is not None
            by_scheme.setdefault(_scheme(op.weight), Counter())[op.kind] += 1
    if not by_scheme:
        return "float"
    ordered = sorted(by_scheme.items(), key=lambda s: -s[1].total())
    return "; ".join(
        f"{scheme}: {', '.join(f'{n} {kind}' for kind, n in sorted(kinds.items()))}"
        for scheme, kinds in ordered
    )


def _fake_quant_text(model: ov.Model) -> str:
    """int8's activations, from its FakeQuantize ops: levels, and signed or not."""
    fqs = [op for op in model.get_ordered_ops() if _type(op) == "FakeQuantize"]
    levels = sorted({int(op.get_attributes()["levels"]) for op in fqs})
    unsigned = 0
    for op in fqs:
        low = op.input(1).get_source_output().get_node()
        if _type(low) == "Constant" and float(min(low.get_data().flat)) >= 0:
            unsigned += 1
    return (
        f"{'/'.join(map(str, levels))} levels, symmetric, static scales calibrated per tensor "
        f"({len(fqs)} FakeQuantize: {unsigned} unsigned, {len(fqs) - unsigned} signed)"
    )


def _notes(ops: list[_Op], precision: str) -> list[str]:
    notes = []
    if precision == "int8":
        weight_only = Counter(op.kind for op in ops if op.low_weight and not op.fake_quantized)
        if weight_only:
            notes.append(f"int8 weights but float activations: {_counted(weight_only)}")
    elif precision == "w4":
        kept = Counter(
            op.kind for op in ops if op.low_weight and op.weight and op.weight.dtype[-1] == "8"
        )
        if kept:
            notes.append(f"NNCF kept {_counted(kept)} in int8, its backup precision")
        adjusted: dict[int, Counter[str]] = {}
        for op in ops:
            if op.low_weight and op.weight and op.weight.group not in (None, W4_GROUP_SIZE):
                adjusted.setdefault(op.weight.group, Counter())[op.kind] += 1
        for size, kinds in sorted(adjusted.items()):
            notes.append(
                f"{_counted(kinds)} in groups of {size}: input channels not a multiple of "
                f"{W4_GROUP_SIZE}"
            )
    convolutions = ("Convolution", "GroupConvolution")
    if precision != "int8" and any(op.low_weight and op.kind in convolutions for op in ops):
        notes.append(
            "the CPU plugin decompresses compressed Convolution weights to f32 when it compiles "
            "(only MatMuls keep them compressed in memory)"
        )
    floats = Counter(op.kind for op in ops if not op.quantized)
    if floats:
        why = " (per-call quantization is for MatMuls only)" if precision == "int8-dyn" else ""
        notes.append(f"stayed float: {_counted(floats)}{why}")
    return notes


def _counted(kinds: Counter[str]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))


@contextlib.contextmanager
def _quiet_nncf() -> Iterator[None]:
    """NNCF logs a table per call and draws progress bars on stdout: keep both off the
    terminal for the call, then put its log level back."""
    import nncf
    from nncf.common.logging import nncf_logger

    level = nncf_logger.level
    nncf.set_log_level(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        nncf.set_log_level(level)
