"""ONNX Runtime's quantized precisions, built by onnxruntime.quantization from the fp32 graph
the ONNX Runtime rung exports (the same graph OpenVINO runs):

- int8-dyn: `quant_pre_process`, then `quantize_dynamic` (QOperator): int8 symmetric
  weights (per channel for MatMul, per tensor for ConvInteger, which takes one zero point),
  activations quantized to uint8 per call (DynamicQuantizeLinear → MatMulInteger /
  ConvInteger);
- int8: `quant_pre_process`, then `quantize_static` in QDQ format with MinMax scales
  calibrated on `Calibration`: int8 activations, int8 per-channel weights;
- w8, w4: `MatMulNBitsQuantizer` (round-to-nearest, groups of 32 along K): MatMul weights
  in 8 or 4 bits, MatMulNBits computing in fp32; convolutions stay float.

The int8 precisions follow ORT's quantization guide for the CPU they run on (`SCHEMES`): on
x86 without VNNI, MLAS multiplies uint8 by int8 with VPMADDUBSW, whose 16-bit sums can
saturate; the guide names two remedies, reduce-range (7-bit weights) and U8U8 (unsigned
weights, multiplied in 16 bits: no saturation). ORT's MLAS picks its kernels from cpuid, so
the choice reads the CPU's own flags, never a narrowed ISA.

The record's ops, weight scheme and bytes are read back from the graph written, so a node
the tool skipped shows up as float rather than being assumed quantized.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from stackcost.env import VNNI_FLAGS, vnni
from stackcost.quantize import Calibration, Ops, QuantRecord, quiet

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from stackcost.workload import Example

# Groups along K for the weight-only precisions: the torchao and NNCF rungs use 32 too, and
# MatMulNBits pads a K that is not a multiple of it.
GROUP_SIZE = 32
BITS = {"w8": 8, "w4": 4}
PRECISIONS = ("int8-dyn", "int8", *BITS)
MODEL = "model.onnx"
# Past this a graph must keep its weights in external files (protobuf's 2 GiB limit).
EXTERNAL_DATA_BYTES = 1 << 30

# How the int8 precisions' weights (and, for static int8, activations) are typed, per the
# guide: full-range S8 weights where VNNI's dot product cannot saturate; reduce-range (7-bit
# S8 weights) or U8U8 where it can. `auto` resolves by the CPU (`int8_scheme`).
SCHEMES = ("auto", "full-range", "reduce-range", "u8u8")
# What `auto` picks without VNNI: the remedy that held the accuracy rule at the better speed
# on an AVX2-only EPYC (benchmarks/int8_schemes.py).
NO_VNNI_SCHEME = "u8u8"

# Op types that carry integer weights or compute on quantized inputs, as the tools emit them.
QUANTIZED_OPS = frozenset(
    {
        "ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "QGemm", "QAttention",
        "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLSTM", "MatMulNBits",
        "MatMulBnb4", "GatherBlockQuantized",
    }
)  # fmt: skip
# Weighted or matmul-like op types that run in float unless fed by a DequantizeLinear (QDQ).
FLOAT_OPS = frozenset(
    {
        "Conv", "ConvTranspose", "MatMul", "Gemm", "Attention", "MultiHeadAttention", "Einsum",
        "LSTM", "GRU", "RNN",
    }
)  # fmt: skip
# Static int8: ops whose outputs stay float (OpTypesToExcludeOutputQuantization).
FLOAT_OUTPUTS = ("Gemm", "MatMul")
# What static int8 quantizes in a transformer's graph (_static): its matrix products.
TRANSFORMER_OPS = ("MatMul", "Gemm")
# Where the weight and its zero point sit among a QOperator node's inputs.
WEIGHT_INPUTS = {
    "ConvInteger": (1, 3),
    "MatMulInteger": (1, 3),
    "QLinearConv": (3, 5),
    "QLinearMatMul": (3, 5),
    "QGemm": (3, 5),
}


def int8_scheme(requested: str, cpu_flags: Sequence[str]) -> tuple[str, str]:
    """The scheme an int8 graph is built with, and why: `requested` unless it is `auto`,
    which follows ORT's guide for a CPU with `cpu_flags` (env.cpu_info's)."""
    if requested not in SCHEMES:
        raise ValueError(f"onnxruntime int8_scheme {requested!r}: use one of {SCHEMES}")
    if requested != "auto":
        return requested, f"{requested}: asked for (-o onnxruntime.int8_scheme)"
    # MLAS reads cpuid, so no ISA cap applies: the CPU's own flags decide.
    if found := vnni(cpu_flags):
        return "full-range", (
            f"auto: this CPU has {', '.join(found)}, whose int8 dot product accumulates in "
            "32 bits, so ORT's guide needs no remedy: full-range S8 weights"
        )
    return NO_VNNI_SCHEME, (
        f"auto: this CPU has no VNNI ({', '.join(VNNI_FLAGS)} absent), so ORT's U8S8 kernels "
        "use VPMADDUBSW, whose 16-bit sums can saturate; of the guide's two remedies "
        f"(reduce-range, u8u8) {NO_VNNI_SCHEME} held the accuracy rule at the better speed "
        "on an AVX2-only CPU (benchmarks/int8_schemes.py)"
    )


def quantize_onnx(
    src: Path,
    dst_dir: Path,
    precision: str,
    calibration: Calibration | None,
    feeds: Callable[[Example], dict[str, np.ndarray]],
    scheme: tuple[str, str] | None = None,
) -> QuantRecord:
    """Quantize the fp32 graph `src` to `precision` into `dst_dir`/model.onnx (a directory
    of its own: external weights land beside it) and record what was built. `feeds` turns
    a calibration example into the graph's inputs (int8 only; its calibration is required).
    `scheme` is `int8_scheme`'s answer (int8 and int8-dyn only): the scheme and its reason;
    None: `auto` for this CPU."""
    import onnxruntime as ort

    from stackcost.env import cpu_info

    if precision not in PRECISIONS:
        raise ValueError(f"onnxruntime has no quantization recipe for precision {precision!r}")
    scheme = scheme or int8_scheme("auto", cpu_info()["flags"])
    if scheme[0] not in SCHEMES[1:]:
        raise ValueError(f"onnxruntime int8 scheme {scheme[0]!r}: use one of {SCHEMES[1:]}")
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / MODEL
    external = _dir_bytes(src.parent) > EXTERNAL_DATA_BYTES
    notes: list[str] = []
    # The tools log on the root logger and under "onnxruntime".
    with quiet("", "onnxruntime"):
        if precision == "int8-dyn":
            tool = _dynamic(src, dst, dst_dir, external, scheme[0], notes)
        elif precision == "int8":
            if calibration is None or not calibration.examples:
                raise ValueError(
                    "precision int8 needs calibration inputs (static activation scales)"
                )
            tool = _static(src, dst, dst_dir, external, calibration, feeds, scheme[0], notes)
        else:
            tool = _weight_only(src, dst, BITS[precision], external, notes)

    import onnx

    built = onnx.load(str(dst))
    ops = count_ops(built)
    if not ops.quantized:
        notes.append("no op was quantized: the graph has no weights the tool quantizes")
    return QuantRecord(
        precision=precision,
        tool=f"onnxruntime {ort.__version__} {tool}",
        weights=weight_scheme(built),
        activations=activation_scheme(built, precision),
        group_size=GROUP_SIZE if precision in BITS else None,
        calibration=calibration.record() if precision == "int8" and calibration else None,
        ops=ops,
        weight_bytes=initializer_bytes(built),
        fp32_weight_bytes=initializer_bytes(onnx.load(str(src))),
        scheme=scheme[0] if precision in ("int8", "int8-dyn") else None,
        scheme_reason=scheme[1] if precision in ("int8", "int8-dyn") else None,
        notes=notes,
    )


def _dynamic(
    src: Path, dst: Path, work: Path, external: bool, scheme: str, notes: list[str]
) -> str:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    pre = _pre_processed(src, work, external, notes)
    # Symmetric weights, per channel where the op's quantizer supports it: S8 (ORT's default,
    # U8S8 with the per-call uint8 activations), 7-bit S8 with reduce-range, or U8 (U8U8,
    # zero point 128) where VNNI is missing.
    weight = QuantType.QUInt8 if scheme == "u8u8" else QuantType.QInt8
    reduce = scheme == "reduce-range"
    quantize_dynamic(
        pre,
        dst,
        per_channel=True,
        reduce_range=reduce,
        weight_type=weight,
        use_external_data_format=external,
        extra_options={"WeightSymmetric": True},
    )
    _drop(pre, src)
    return (
        f"quantize_dynamic (QOperator, per_channel=True, weight_type={weight.name}, "
        f"reduce_range={reduce})"
    )


def _static(
    src: Path,
    dst: Path,
    work: Path,
    external: bool,
    calibration: Calibration,
    feeds: Callable[[Example], dict[str, np.ndarray]],
    scheme: str,
    notes: list[str],
) -> str:
    import onnx
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    # A transformer (attention: a Softmax in its graph) adds its attention mask as the
    # float minimum (-3.4e38), a tensor whose MinMax range swallows every other value: with
    # every op quantized, a BERT classifier agreed with fp32 on 52% of 675 examples. ORT's
    # guidance for transformers is to quantize their matrix products; the rest stays float.
    # Its pre-processing is skipped there: that optimized graph, quantized so, fails ORT's
    # session initialization (graph_utils AddInitializerWithOrtValue).
    graph = onnx.load(str(src), load_external_data=False).graph
    transformer = any(n.op_type == "Softmax" for n in graph.node)
    if transformer:
        pre = src
        notes.append(
            f"a transformer (Softmax in the graph): only {'/'.join(TRANSFORMER_OPS)} quantized; "
            "quant_pre_process skipped"
        )
    else:
        pre = _pre_processed(src, work, external, notes)
    # S8S8 in QDQ: ORT's recommended first choice on x86 CPUs (7-bit weights with
    # reduce-range); U8U8 where VNNI is missing and the guide's other remedy is chosen.
    # Asymmetric activations use the whole range on one-sided (post-ReLU) tensors. Gemm and
    # MatMul keep float outputs (ORT runs QGemm / MatMulIntegerToFloat): a quantized graph
    # output would clip the logits to the range the few calibration batches reached.
    qtype = QuantType.QUInt8 if scheme == "u8u8" else QuantType.QInt8
    reduce = scheme == "reduce-range"
    quantize_static(
        pre,
        dst,
        _Reader([feeds(example) for example in calibration.examples]),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        reduce_range=reduce,
        activation_type=qtype,
        weight_type=qtype,
        calibrate_method=CalibrationMethod.MinMax,
        use_external_data_format=external,
        extra_options={
            "ActivationSymmetric": False,
            "WeightSymmetric": True,
            "OpTypesToExcludeOutputQuantization": list(FLOAT_OUTPUTS),
        },
        **({"op_types_to_quantize": list(TRANSFORMER_OPS)} if transformer else {}),
    )
    _drop(pre, src)
    notes.append(f"outputs of {', '.join(FLOAT_OUTPUTS)} left float (their inputs are int8)")
    notes.append(_session_ops(dst))
    pair = "U8U8" if scheme == "u8u8" else "S8S8"
    only = f", op_types_to_quantize={'/'.join(TRANSFORMER_OPS)}" if transformer else ""
    return (
        f"quantize_static (QDQ, per_channel=True, {pair}, reduce_range={reduce}, "
        f"MinMax calibration{only})"
    )


def _weight_only(src: Path, dst: Path, bits: int, external: bool, notes: list[str]) -> str:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    from onnxruntime.quantization.onnx_model import ONNXModel

    model = ONNXModel(onnx.load(str(src)))
    # MatMulNBits replaces MatMul only, and the exporters write a 2-D Linear as Gemm:
    # ORT's own rewrite (the one quantize_dynamic applies) turns each Gemm into MatMul + Add.
    gemms = sum(n.op_type == "Gemm" for n in model.nodes())
    model.replace_gemm_with_matmul()
    if gemms:
        notes.append(
            f"{gemms} Gemm rewritten as MatMul + Add (onnxruntime ONNXModel."
            "replace_gemm_with_matmul) so MatMulNBits can take their weights"
        )
    # Asymmetric (ORT's default: a zero point per group); accuracy_level unset, so
    # MatMulNBits dequantizes and multiplies in fp32: the activations stay float.
    quantizer = MatMulNBitsQuantizer(
        model.model, bits=bits, block_size=GROUP_SIZE, is_symmetric=False, accuracy_level=None
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=external)
    notes.append(
        "MatMulNBits quantizes MatMul weights only: Conv and other weighted ops stay float"
    )
    return (
        f"MatMulNBitsQuantizer (bits={bits}, block_size={GROUP_SIZE}, round-to-nearest, "
        "QOperator, accuracy_level unset)"
    )


def _session_ops(path: Path) -> str:
    """What a QDQ graph becomes: the integer kernels ORT's CPU session fuses it into (all
    optimizations), in words; the counted ops are the graph's, before that fusion."""
    import tempfile

    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        so.optimized_model_filepath = str(Path(tmp) / MODEL)
        try:
            ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            fused = onnx.load(so.optimized_model_filepath, load_external_data=False)
        except Exception as error:  # a graph too large to write back in one file
            return f"the CPU session's fused kernels were not read ({type(error).__name__})"
    kernels = Counter(
        n.op_type for n in fused.graph.node if n.op_type in QUANTIZED_OPS or n.op_type in FLOAT_OPS
    )
    listed = ", ".join(f"{op} x{n}" for op, n in sorted(kernels.items())) or "none"
    return f"QDQ graph; ORT's CPU session (all optimizations) runs its weighted ops as: {listed}"


class _Reader:
    """onnxruntime.quantization's CalibrationDataReader over prepared feeds (it checks for
    get_next by duck typing)."""

    def __init__(self, batches: list[dict[str, np.ndarray]]) -> None:
        self._batches = iter(batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def _pre_processed(src: Path, work: Path, external: bool, notes: list[str]) -> Path:
    """ORT's recommended pre-processing (symbolic shape inference, graph optimization such as
    Conv+BatchNorm folding) into `work`; the fp32 graph itself when it fails, as a note."""
    from onnxruntime.quantization import quant_pre_process

    pre = work / "preprocessed" / MODEL
    pre.parent.mkdir(parents=True, exist_ok=True)
    try:
        quant_pre_process(str(src), str(pre), save_as_external_data=external)
    except Exception as error:
        notes.append(
            f"quant_pre_process failed ({type(error).__name__}: {error}); used the raw graph"[:300]
        )
        return src
    return pre


def _drop(pre: Path, src: Path) -> None:
    """Remove the pre-processed graph: only the quantized graph's files belong to the
    artifact (its size is the sum of the files there)."""
    import shutil

    if pre != src:
        shutil.rmtree(pre.parent, ignore_errors=True)


def count_ops(model: onnx.ModelProto) -> Ops:
    """Quantized and float weighted (and matmul-like) ops of the built graph: an integer or
    n-bit op is quantized; so is, in QDQ format, a float op fed by a DequantizeLinear; a
    Gather is counted when it looks up a table among the initializers (an embedding), as
    quantized when the table is integer and the rows it picks are dequantized."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    dequantized = [n for n in graph.node if n.op_type == "DequantizeLinear"]
    dq_outputs = {o for n in dequantized for o in n.output}
    dq_inputs = {n.input[0] for n in dequantized}
    quantized: Counter[str] = Counter()
    floats: Counter[str] = Counter()
    for node in graph.node:
        op = node.op_type
        if op in QUANTIZED_OPS:
            quantized[op] += 1
        elif op in FLOAT_OPS:
            fed = any(i in dq_outputs for i in node.input[:3])
            (quantized if fed else floats)[op] += 1
        elif op == "Gather" and node.input and node.input[0] in inits:
            kind = _kind(inits[node.input[0]])
            if kind == "float":
                floats[op] += 1
            elif kind == "int" and dq_inputs.intersection(node.output):
                quantized[op] += 1
    return Ops(quantized=dict(sorted(quantized.items())), float=dict(sorted(floats.items())))


def _kind(tensor: onnx.TensorProto) -> str:
    import onnx

    t = onnx.TensorProto
    if tensor.data_type in (t.FLOAT, t.FLOAT16, t.BFLOAT16, t.DOUBLE):
        return "float"
    if tensor.data_type in (t.INT8, t.UINT8, t.INT4, t.UINT4):
        return "int"
    return "other"


def weight_scheme(model: onnx.ModelProto) -> str:
    """The quantized weights as the graph stores them, by op: "int8 symmetric per-channel
    (MatMulInteger x3)", one phrase per distinct scheme; "float" when none is quantized."""
    import onnx

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    schemes: Counter[str] = Counter()
    for node in graph.node:
        op = node.op_type
        if op == "MatMulNBits":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            has_zp = len(node.input) > 3 and bool(node.input[3])
            side = "asymmetric" if has_zp else "symmetric"
            schemes[
                f"int{attrs['bits']} {side}, groups of {attrs['block_size']} (MatMulNBits)"
            ] += 1
        elif op in WEIGHT_INPUTS:
            w, zp = WEIGHT_INPUTS[op]
            if len(node.input) > w and node.input[w] in inits:
                zp_t = inits.get(node.input[zp]) if len(node.input) > zp else None
                schemes[f"{_describe(inits[node.input[w]], zp_t)} ({op})"] += 1
        elif op in FLOAT_OPS:
            for name in node.input[1:3]:
                dq = producer.get(name)
                if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in inits:
                    zp_t = inits.get(dq.input[2]) if len(dq.input) > 2 else None
                    scale = inits.get(dq.input[1])
                    schemes[f"{_describe(inits[dq.input[0]], zp_t, scale)} ({op}, QDQ)"] += 1
                    break
    if not schemes:
        return "float"
    return "; ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(schemes.items()))


def _type_name(tensor: onnx.TensorProto) -> str:
    from onnx import helper

    return helper.tensor_dtype_to_string(tensor.data_type).removeprefix("TensorProto.").lower()


def _symmetric(zp: onnx.TensorProto | None) -> bool:
    """Whether every zero point sits at its type's midpoint (0 for a signed type)."""
    import numpy as np
    from onnx import numpy_helper

    if zp is None:  # absent: zero
        return True
    mid = {"uint8": 128, "uint4": 8, "uint16": 32768}.get(_type_name(zp), 0)
    return bool(np.all(numpy_helper.to_array(zp).astype(np.int64) == mid))


def _describe(
    weight: onnx.TensorProto, zp: onnx.TensorProto | None, scale: onnx.TensorProto | None = None
) -> str:
    """A weight's scheme, as "int8 symmetric per-channel": its type, whether its zero points
    sit at the type's midpoint, whether it has more than one scale (or zero point), and
    ", 7-bit range" when every value fits in 7 bits about its zero point (reduce-range)."""
    import math

    import numpy as np
    from onnx import numpy_helper

    per = scale if scale is not None else zp
    count = math.prod(per.dims) if per is not None else 1
    side = "symmetric" if _symmetric(zp) else "asymmetric"
    described = f"{_type_name(weight)} {side} {'per-channel' if count > 1 else 'per-tensor'}"
    values = numpy_helper.to_array(weight).astype(np.int64)
    mid = 128 if _type_name(weight) == "uint8" else 0
    if values.size and side == "symmetric" and np.abs(values - mid).max() <= 64:
        described += ", 7-bit range"
    return described


def activation_scheme(model: onnx.ModelProto, precision: str) -> str:
    """The activations as the graph quantizes them: per call (DynamicQuantizeLinear), with
    static scales (QuantizeLinear on a computed tensor), or not at all."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    if any(n.op_type == "DynamicQuantizeLinear" for n in graph.node):
        return "uint8 asymmetric per-tensor, dynamic (scales computed per call)"
    points = [
        inits[n.input[2]]
        for n in graph.node
        if n.op_type == "QuantizeLinear"
        and n.input[0] not in inits
        and len(n.input) > 2
        and n.input[2] in inits
    ]
    if points:
        types = ", ".join(sorted({_type_name(zp) for zp in points}))
        side = "symmetric" if all(_symmetric(zp) for zp in points) else "asymmetric"
        return f"{types} {side} per-tensor, static (calibrated scales)"
    return "float (fp32)" if precision in BITS else "float"


def initializer_bytes(model: onnx.ModelProto) -> int:
    """The bytes of the graph's initializers as stored (packed int4 included)."""
    from onnx import numpy_helper

    total = 0
    for t in model.graph.initializer:
        total += len(t.raw_data) if t.raw_data else numpy_helper.to_array(t).nbytes
    return total


def _dir_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
