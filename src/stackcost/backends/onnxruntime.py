"""ONNX Runtime: the model exported to ONNX and run by ORT's CPU (or CUDA) provider; a
quantized precision runs that graph as onnxruntime.quantization rewrites it (CPU only)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.axes import QUANTIZED
from stackcost.backends.base import Availability, Backend, Capabilities, Option, Prepared
from stackcost.backends.onnx_export import EXPORTERS, derived, feeds_by_name
from stackcost.backends.ort_options import OPT_LEVELS, PROVIDERS, opt_levels, session_options
from stackcost.quantize.onnx import SCHEMES

if TYPE_CHECKING:
    from stackcost.backends.base import PrepareContext
    from stackcost.cell import Cell
    from stackcost.workload import Example


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    description = (
        "ONNX export + ONNX Runtime InferenceSession (fp32; int8-dyn, int8, w8, w4 by "
        "onnxruntime.quantization, CPU)"
    )
    # No bf16/fp16: that rung would need a converted graph, a different model to compare.
    # The quantized graphs come from onnxruntime.quantization (stackcost.quantize.onnx).
    capabilities = Capabilities(
        devices=frozenset({"cpu", "cuda"}), precisions=frozenset({"fp32", *QUANTIZED})
    )
    generator = "stackcost.generation.onnxruntime:OrtGenAIGenerator"
    # opt_level: ORT's graph optimization levels ("layout" needs ORT >= 1.22, checked
    # against the installed one when the session is made). int8_scheme: how int8 graphs
    # meet the CPU's int8 dot product (quantize.onnx.SCHEMES; auto follows ORT's guide).
    # accuracy_level: how a w8/w4 decoder's MatMulNBits computes under generate
    # (generation/onnxruntime.py): 4 (the builder's CPU default) quantizes activations to
    # int8, as llama.cpp's Q8_0/Q4_0 dot products do; 1 dequantizes and multiplies in fp32.
    options = {
        "exporter": Option("dynamo", EXPORTERS),
        "opt_level": Option("all", tuple(OPT_LEVELS)),
        "int8_scheme": Option("auto", SCHEMES, "full-range, reduce-range or u8u8 weights"),
        "accuracy_level": Option(
            "4", ("1", "4"), "w8/w4 decoders: MatMulNBits with int8 activations (4) or fp32 (1)"
        ),
    }

    def available(self) -> Availability:
        return Availability.needs_modules(
            "onnxruntime", "onnx", "onnxscript", install="pip install 'stackcost[onnx]'"
        )

    def prepare(self, model, example, cell, ctx):
        import time

        import numpy as np
        import onnxruntime as ort

        from stackcost.backends.onnx_export import onnx_for

        opt_level = self.option(cell, "opt_level")
        if opt_level not in opt_levels(ort):  # before the export, which takes a while
            raise ValueError(f"onnxruntime opt_level {opt_level!r}: use one of {opt_levels(ort)}")
        provider = PROVIDERS[cell.device]
        if provider not in ort.get_available_providers():
            raise RuntimeError(
                f"onnxruntime {ort.__version__} has no {provider} "
                f"(available: {', '.join(ort.get_available_providers())}); "
                "for cuda install onnxruntime-gpu instead of onnxruntime"
            )

        exporter = self.option(cell, "exporter")
        chosen = "exporter" in cell.backend_options
        path, details = onnx_for(model, example, cell, ctx, exporter, fallback=not chosen)
        if cell.precision in QUANTIZED:
            scheme = self.option(cell, "int8_scheme")
            path, details = _quantized(path, details, cell, ctx, scheme)

        spinning = not ctx.paced  # an idle, spinning worker would slow the other side's bursts
        so = session_options(ort, cell.threads, opt_level, spinning=spinning)
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

        def infer(ex: Example) -> Any:
            given = ex.named()
            arrays = {i.name: given[i.name].detach().cpu().numpy() for i in sess.get_inputs()}
            return sess.run(None, {n: np.ascontiguousarray(a) for n, a in arrays.items()})

        details.update(
            {
                "opt_level": opt_level,
                "intra_op_threads": used.intra_op_num_threads,
                "inter_op_threads": used.inter_op_num_threads,
                "execution_mode": "sequential",
                "intra_op_spinning": spinning,
                "providers": sess.get_providers(),
                "session_s": session_s,
                "onnxruntime": ort.__version__,
            }
        )
        state = {
            "path": path, "feeds": feeds, "provider": provider, "opt_level": opt_level,
            "spinning": spinning,
            "profile_dir": ctx.workdir / "profile",
        }  # fmt: skip
        return Prepared(step, details, state=state, infer=infer)

    def breakdown(self, run, cell, iters):
        # ORT's own profiler, in a second session with the same settings and profiling on:
        # the measured session stays unprofiled. torch.profiler would not see its kernels.
        import onnxruntime as ort

        from stackcost.profile import profile_ort

        assert run.prepared is not None
        s = run.prepared.state

        def options(prefix: Path | None) -> Any:
            return session_options(ort, cell.threads, s["opt_level"], prefix, s["spinning"])

        return profile_ort(
            s["path"], s["feeds"], options, s["profile_dir"], iters=iters,
            providers=(s["provider"],),
        )  # fmt: skip


def _quantized(
    src: Path, export: dict[str, Any], cell: Cell, ctx: PrepareContext, requested: str
) -> tuple[Path, dict[str, Any]]:
    """The fp32 graph `src` quantized to the cell's precision by onnxruntime.quantization,
    and the details to record: made once per cell with the run's artifact cache, keyed by
    the fp32 graph it came from, the precision, ORT's version and the calibration set."""
    import time

    import onnxruntime as ort

    from stackcost.env import cpu_info
    from stackcost.quantize.onnx import MODEL, int8_scheme, quantize_onnx

    precision, calibration = cell.precision, ctx.calibration
    feeds = feeds_by_name(export["onnx_inputs"])
    scheme = int8_scheme(requested, cpu_info()["flags"])

    def make(home: Path) -> dict[str, Any]:
        start = time.perf_counter()
        record = quantize_onnx(src, home, precision, calibration, feeds, scheme)
        return {
            "quantization": record.details(),
            "quantize_s": time.perf_counter() - start,
            "quantized_onnx_bytes": sum(f.stat().st_size for f in home.iterdir() if f.is_file()),
        }

    versions = {"onnxruntime": ort.__version__}
    if precision in ("int8", "int8-dyn"):  # part of the recipe: another CPU's is not reused
        versions["int8_scheme"] = scheme[0]
    home, details = derived("onnx-quantized", export, cell, ctx, versions, make)
    return home / MODEL, details
