"""OpenVINO: the model exported to ONNX and compiled by OpenVINO's CPU plugin."""

from __future__ import annotations

from stackcost.backends.base import Availability, Backend, Capabilities, Option, Prepared
from stackcost.backends.onnx_export import EXPORTERS

_HINTS = {"fp32": "f32", "bf16": "bf16"}


class OpenVINOBackend(Backend):
    name = "openvino"
    description = "ONNX export + OpenVINO CPU plugin (explicit inference precision, LATENCY hint)"
    capabilities = Capabilities(precisions=frozenset({"fp32", "bf16"}))
    options = {"exporter": Option("dynamo", EXPORTERS)}
    # PERF_COUNT's per-node times did not add up to the wall time (averaged, not per call).
    torch_profiled = False

    def available(self) -> Availability:
        return Availability.needs_modules(
            "openvino", "onnx", "onnxscript", install="pip install 'stackcost[onnx,openvino]'"
        )

    def prepare(self, model, example, cell, ctx):
        import time

        import numpy as np
        import openvino as ov

        from stackcost.backends.onnx_export import onnx_for

        core = ov.Core()
        if cell.precision == "bf16" and "BF16" not in core.get_property(
            "CPU", "OPTIMIZATION_CAPABILITIES"
        ):
            raise RuntimeError("openvino bf16 requested but this CPU has no BF16 support")

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
        start = time.perf_counter()
        compiled = core.compile_model(str(path), "CPU", config)
        compile_s = time.perf_counter() - start

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
            # Output buffers are reused by the next infer, so hand back copies.
            return [request.get_output_tensor(i).data.copy() for i in range(n_outputs)]

        details.update(
            {
                "device": "CPU",
                "inference_precision_requested": config["INFERENCE_PRECISION_HINT"],
                "inference_precision": compiled.get_property(
                    "INFERENCE_PRECISION_HINT"
                ).get_type_name(),
                "inference_threads": compiled.get_property("INFERENCE_NUM_THREADS"),
                "num_streams": compiled.get_property("NUM_STREAMS"),
                "performance_hint": str(compiled.get_property("PERFORMANCE_HINT")),
                "compile_s": compile_s,
                "openvino": ov.get_version(),
            }
        )
        return Prepared(step, details)
