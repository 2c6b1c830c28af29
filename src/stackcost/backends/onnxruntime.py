"""ONNX Runtime: the model exported to ONNX and run by ORT's CPU (or CUDA) provider."""

from __future__ import annotations

from stackcost.backends.base import Availability, Backend, Capabilities, Prepared

_OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",  # ORT >= 1.22
    "all": "ORT_ENABLE_ALL",
}
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    description = "ONNX export + ONNX Runtime InferenceSession (fp32 only)"
    # fp32 only: a bf16/fp16 rung would need a converted graph, a different model to compare.
    capabilities = Capabilities(devices=frozenset({"cpu", "cuda"}), precisions=frozenset({"fp32"}))
    options = {"exporter": "dynamo", "opt_level": "all"}
    torch_profiled = False  # its own profiler: Prepared.breakdown

    def available(self) -> Availability:
        return Availability.needs_modules(
            "onnxruntime", "onnx", "onnxscript", install="pip install 'stackcost[onnx]'"
        )

    def prepare(self, model, example, cell, ctx):
        import time

        import numpy as np
        import onnxruntime as ort

        from stackcost.backends.onnx_export import export_onnx

        opt_level = self.option(cell, "opt_level")
        if opt_level not in _OPT_LEVELS or not hasattr(
            ort.GraphOptimizationLevel, _OPT_LEVELS[opt_level]
        ):
            allowed = [k for k, v in _OPT_LEVELS.items() if hasattr(ort.GraphOptimizationLevel, v)]
            raise ValueError(f"onnxruntime opt_level {opt_level!r}: use one of {allowed}")
        provider = _PROVIDERS[cell.device]
        if provider not in ort.get_available_providers():
            raise RuntimeError(
                f"onnxruntime {ort.__version__} has no {provider} "
                f"(available: {', '.join(ort.get_available_providers())}); "
                "for cuda install onnxruntime-gpu instead of onnxruntime"
            )

        path = ctx.workdir / "onnx" / "model.onnx"
        details = export_onnx(model, example, path, self.option(cell, "exporter"))

        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[opt_level])
        so.intra_op_num_threads = cell.threads
        so.inter_op_num_threads = 1  # sequential execution: one op at a time
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        start = time.perf_counter()
        sess = ort.InferenceSession(str(path), so, providers=[provider])
        session_s = time.perf_counter() - start
        # ORT falls back to CPU silently when a provider fails to load.
        if sess.get_providers()[0] != provider:
            raise RuntimeError(f"onnxruntime did not use {provider}: got {sess.get_providers()}")

        # Fed by the graph's input names (an exporter may drop an input the graph never
        # reads); every output comes back, in the graph's order.
        given = {
            n: np.ascontiguousarray(t.detach().cpu().numpy()) for n, t in example.named().items()
        }
        feeds = {i.name: given[i.name] for i in sess.get_inputs()}
        used = sess.get_session_options()

        def step():
            return sess.run(None, feeds)

        def breakdown(iters: int):
            # A second session with the same settings and profiling on: the measured
            # session stays unprofiled.
            from stackcost.profile import profile_ort

            return profile_ort(
                path, feeds, cell.threads, ctx.workdir / "profile", iters=iters,
                providers=(provider,), opt_level=opt_level,
            )  # fmt: skip

        details.update(
            {
                "opt_level": opt_level,
                "intra_op_threads": used.intra_op_num_threads,
                "inter_op_threads": used.inter_op_num_threads,
                "execution_mode": "sequential",
                "providers": sess.get_providers(),
                "session_s": session_s,
                "onnxruntime": ort.__version__,
            }
        )
        return Prepared(step, details, breakdown=breakdown)
