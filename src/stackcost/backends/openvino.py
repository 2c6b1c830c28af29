"""OpenVINO: the model exported to ONNX and compiled by OpenVINO's CPU plugin; a quantized
precision is built from that graph by NNCF (stackcost.quantize.openvino)."""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.backends.base import (
    Availability,
    Backend,
    Capabilities,
    Option,
    Prepared,
    Unsupported,
)
from stackcost.backends.onnx_export import EXPORTERS, derived, feeds_by_name
from stackcost.quantize import is_quantized
from stackcost.quantize.openvino import DYNAMIC_GROUP, OVERFLOW_FIXES
from stackcost.quantize.openvino import PRECISIONS as QUANTIZED_PRECISIONS

if TYPE_CHECKING:
    from stackcost.backends.base import PrepareContext
    from stackcost.cell import Cell
    from stackcost.workload import Example

MODEL = "model.xml"  # a quantized model's IR (its weights beside it, model.bin)
# A quantized cell's float parts (ops NNCF left float, decompressed weights, the activations
# of weight-only ops) stay f32: left to itself the plugin runs them bf16 on a CPU with bf16,
# and the cell would measure two precision changes at once.
_HINTS = {"fp32": "f32", "bf16": "bf16", **dict.fromkeys(QUANTIZED_PRECISIONS, "f32")}


class OpenVINOBackend(Backend):
    name = "openvino"
    description = "ONNX export + OpenVINO CPU plugin (explicit inference precision, LATENCY hint)"
    capabilities = Capabilities(precisions=frozenset({"fp32", "bf16", *QUANTIZED_PRECISIONS}))
    generator = "stackcost.generation.openvino:OpenVINOGenAIGenerator"
    # overflow_fix: NNCF's saturation fix for int8 (quantize.openvino.OVERFLOW_FIXES; auto
    # follows OpenVINO's guide for the ISA oneDNN will run).
    options = {
        "exporter": Option("dynamo", EXPORTERS),
        "overflow_fix": Option("auto", OVERFLOW_FIXES, "NNCF's 7-bit weight fix for int8"),
    }
    # PERF_COUNT's per-node times did not add up to the wall time (averaged, not per call).
    torch_profiled = False

    def available(self) -> Availability:
        return Availability.needs_modules(
            "openvino", "onnx", "onnxscript", install="pip install 'stackcost[onnx,openvino]'"
        )

    def why_not(self, cell: Cell) -> str | None:
        if cell.precision == "int8-dyn" and platform.machine().lower() not in ("x86_64", "amd64"):
            # The ARM plugin's per-call quantization takes other weights and settings.
            return (
                "precision int8-dyn: OpenVINO's per-call activation quantization is wired for "
                f"x86 CPUs only (this is {platform.machine()}); VNNI is checked when it is built"
            )
        return super().why_not(cell)

    def prepare(self, model, example, cell, ctx):
        import time

        import openvino as ov

        from stackcost.backends.onnx_export import onnx_for

        core = ov.Core()
        if cell.precision == "bf16":
            _check_bf16(core)

        exporter = self.option(cell, "exporter")
        chosen = "exporter" in cell.backend_options
        path, details = onnx_for(model, example, cell, ctx, exporter, fallback=not chosen)

        # The precision hint is always explicit: on CPUs with bf16 (AMX/AVX512-BF16) the
        # plugin silently runs bf16 when asked for nothing.
        config = {
            "INFERENCE_PRECISION_HINT": _HINTS[cell.precision],
            "INFERENCE_NUM_THREADS": cell.threads,
            "PERFORMANCE_HINT": "LATENCY",
        }
        if is_quantized(cell.precision):
            fix = self.option(cell, "overflow_fix")
            path, details = _quantized(path, details, example, cell, ctx, config, fix)
            config.update(details["compile_config"])
        start = time.perf_counter()
        compiled = core.compile_model(str(path), "CPU", config)
        compile_s = time.perf_counter() - start

        step, infer = _bound(compiled, example)
        details.update(_compiled_details(compiled, config, compile_s))
        if is_quantized(cell.precision):
            # Read back: what the plugin runs with, not only what was asked.
            details["dynamic_quantization_group_size"] = compiled.get_property(DYNAMIC_GROUP)
        return Prepared(step, details, infer=infer, keep=_copies)


def _check_bf16(core: Any) -> None:
    """Refuse a bf16 cell this CPU, or oneDNN's ISA cap, cannot run."""
    from stackcost.env import ONEDNN_CAP_NAMES, onednn_bf16_capped, onednn_cap

    if "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        raise RuntimeError("openvino bf16 requested but this CPU has no BF16 support")
    if onednn_bf16_capped(cap := onednn_cap()):
        # The plugin reads the CPU's flags and would fail to compile the model.
        raise RuntimeError(
            f"openvino bf16 requested but oneDNN is capped at {cap} "
            f"({ONEDNN_CAP_NAMES}), which has no BF16 kernels"
        )


def _bound(compiled: Any, example: Example) -> tuple[Callable[[], Any], Callable[[Example], Any]]:
    """The timed step, bound once to `example`, and an infer for any other example."""
    import numpy as np
    import openvino as ov

    # Bind the inputs once, by the graph's names (copied into OV-owned tensors, so no
    # lifetime ties to numpy); step then is infer alone, without per-call conversion.
    given = example.named()
    request = compiled.create_infer_request()
    for port in compiled.inputs:
        x = np.ascontiguousarray(given[port.get_any_name()].detach().cpu().numpy())
        request.set_tensor(port, ov.Tensor(x))
    n_outputs = len(compiled.outputs)

    def step():
        request.infer()
        # Views of the request's buffers, as a user reads them: the next infer overwrites
        # them, so what is held past it goes through `_copies` (Prepared.keep).
        return [request.get_output_tensor(i).data for i in range(n_outputs)]

    # A request of its own: the step's stays bound to its example.
    other = compiled.create_infer_request()

    def infer(ex: Example) -> Any:
        given = ex.named()
        other.infer(
            {
                p: np.ascontiguousarray(given[p.get_any_name()].detach().cpu().numpy())
                for p in compiled.inputs
            }
        )
        return [other.get_output_tensor(i).data.copy() for i in range(n_outputs)]

    return step, infer


def _copies(outputs: list[Any]) -> list[Any]:
    """The step's output views, copied out of the buffers the next infer reuses."""
    return [o.copy() for o in outputs]


def _compiled_details(compiled: Any, config: dict[str, Any], compile_s: float) -> dict[str, Any]:
    """What the compiled model runs with, read back from the plugin, beside what was asked."""
    import openvino as ov

    return {
        "device": "CPU",
        "inference_precision_requested": config["INFERENCE_PRECISION_HINT"],
        "inference_precision": compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name(),
        "inference_threads": compiled.get_property("INFERENCE_NUM_THREADS"),
        "num_streams": compiled.get_property("NUM_STREAMS"),
        "performance_hint": str(compiled.get_property("PERFORMANCE_HINT")),
        "compile_s": compile_s,
        "openvino": ov.get_version(),
    }


def _quantized(
    src: Path,
    export: dict[str, Any],
    example: Example,
    cell: Cell,
    ctx: PrepareContext,
    config: dict[str, Any],
    requested_fix: str,
) -> tuple[Path, dict[str, Any]]:
    """The fp32 graph `src` quantized to the cell's precision by NNCF and saved as OpenVINO
    IR, and the details to record: made once per cell with the run's artifact cache, keyed
    by the fp32 graph it came from, the precision, NNCF's and OpenVINO's versions and the
    calibration set."""
    import time
    from importlib import metadata

    import openvino as ov

    from stackcost.env import ONEDNN_CAP_NAMES, VNNI_FLAGS, cpu_info, onednn_cap, vnni
    from stackcost.quantize.openvino import (
        dynamic_quantization_changes,
        overflow_fix,
        quantize_model,
    )

    precision, calibration = cell.precision, ctx.calibration
    feeds = feeds_by_name(export["onnx_inputs"])
    # The ISA oneDNN runs here: the CPU's, capped where the cell's environment narrowed it.
    flags, cap = cpu_info()["flags"], onednn_cap()
    fix = overflow_fix(requested_fix, flags, cap)
    if precision == "int8-dyn" and not vnni(flags, cap):
        # Without VNNI the plugin keeps activations float (caught below, after the build);
        # with the CPU's VNNI hidden from oneDNN by a cap, it picks the VNNI kernel anyway
        # and oneDNN cannot create it ("could not create a primitive descriptor").
        where = f"oneDNN is capped at {cap} ({ONEDNN_CAP_NAMES})" if cap else "this CPU has none"
        raise Unsupported(
            "precision int8-dyn: OpenVINO's per-call activation quantization needs VNNI "
            f"(one of {', '.join(VNNI_FLAGS)}) and {where}"
        )

    def make(home: Path) -> dict[str, Any]:
        start = time.perf_counter()
        built = quantize_model(ov.Core().read_model(str(src)), precision, calibration, feeds, fix)
        made: dict[str, Any] = {
            "quantization": built.record.details(),
            "compile_config": built.config,
            "quantize_s": time.perf_counter() - start,
        }
        if precision == "int8-dyn":
            # Without VNNI the plugin quietly keeps activations float: the same kernels
            # would answer bit for bit as with the quantization off.
            inputs = feeds(calibration.examples[0] if calibration else example)
            changed = dynamic_quantization_changes(built.model, {**config, **built.config}, inputs)
            if changed == 0.0:
                raise Unsupported(
                    "precision int8-dyn: OpenVINO's CPU plugin did not quantize activations "
                    f"per call on this CPU ({DYNAMIC_GROUP}={built.config[DYNAMIC_GROUP]} "
                    "answered exactly as 0)"
                )
            made["dynamic_quantization_max_abs_change"] = changed
        # As NNCF built it: fp16 compression would round its f32 scales and biases again.
        ov.save_model(built.model, home / MODEL, compress_to_fp16=False)
        made["quantized_ir_bytes"] = sum(f.stat().st_size for f in home.iterdir() if f.is_file())
        return made

    versions = {"nncf": metadata.version("nncf"), "openvino": ov.get_version()}
    if precision == "int8":  # part of the recipe: another ISA's model is not reused
        versions["overflow_fix"] = fix[0]
    home, details = derived("openvino-quantized", export, cell, ctx, versions, make)
    return home / MODEL, details
