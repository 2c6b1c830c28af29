"""AOTInductor: torch.export graph compiled ahead of time into a .pt2 package, then loaded."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from stackcost.backends.base import Availability, Backend, Capabilities, Prepared
from stackcost.backends.torch_common import (
    LAYOUT_OPTION,
    REDUCE_OPTION,
    cast,
    numerics,
    probe_vec_isa,
    quantized,
    torch_dtype,
)
from stackcost.quantize.pytorch import COMPILED_PATHS


class ExportAOTBackend(Backend):
    name = "export-aot"
    omp_threads = True
    description = (
        "torch.export + AOTInductor package (aoti_compile_and_package, compiled in prepare)"
    )
    capabilities = Capabilities(
        devices=frozenset({"cpu", "cuda"}),
        precisions=frozenset({"fp32", "tf32", "bf16", "amp", *COMPILED_PATHS}),
    )
    options = {"reduce_range": REDUCE_OPTION, "layout_optimization": LAYOUT_OPTION}

    def available(self) -> Availability:
        if shutil.which("g++") is None and shutil.which("c++") is None:
            return Availability(False, "no C++ compiler: apt-get install g++")
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return Availability(False, "torch not installed: pip install torch")
        # Importing torch._inductor would import torch; reading its source is cheap.
        init = Path(spec.submodule_search_locations[0]) / "_inductor" / "__init__.py"
        try:
            has_aoti = "def aoti_compile_and_package" in init.read_text()
        except OSError:
            has_aoti = False
        if not has_aoti:
            return Availability(
                False,
                "torch lacks torch._inductor.aoti_compile_and_package: pip install 'torch>=2.6'",
            )
        return Availability(True)

    def prepare(self, model, example, cell, ctx):
        import time
        import warnings

        import torch
        from torch._inductor.utils import fresh_cache

        precision = numerics(cell)
        model, example = cast(model, example, cell)
        isa = probe_vec_isa()  # before fresh_cache below: the probe's library is the machine's

        configs = {"layout_optimization": self.option(cell, "layout_optimization") == "true"}

        def make(home: Path) -> dict:
            package = home / "model.pt2"
            built, record = quantized(
                model, example, cell, ctx, COMPILED_PATHS, self.quantize_scale_error
            )
            with warnings.catch_warnings():
                # torch's own pytree deprecation (LeafSpec) fires in export and packaging.
                warnings.simplefilter("ignore", FutureWarning)
                start = time.perf_counter()
                # amp: the autocast inside the exported forward, so the program holds it.
                exportable = precision.exportable(built)
                program = torch.export.export(exportable, example.args, example.kwargs)
                export_s = time.perf_counter() - start
                start = time.perf_counter()
                # A fresh inductor cache beside the package: compile_s is a real compile,
                # not a hit from an earlier run.
                with fresh_cache(dir=str(home), delete=False):
                    torch._inductor.aoti_compile_and_package(
                        program, package_path=str(package), inductor_configs=configs
                    )
                compile_s = time.perf_counter() - start
            return {"export_s": export_s, "compile_s": compile_s, **record}

        if ctx.cache is None:
            home, record = ctx.workdir, make(ctx.workdir)
        else:  # the cell's later repetitions load the first one's package
            key = {
                "artifact": "aoti-package",
                "cell": cell.key(),  # threads too: Inductor bakes the thread count into kernels
                "weights": ctx.weights_digest,
                "torch": torch.__version__,
            }
            home, record = ctx.cache.reuse_or_make(key, make)
        # torch.export hands cuDNN's TF32 flags back in their legacy form ("ieee" comes
        # back as "none", which cuDNN also reads as no TF32): set them again, so the step
        # runs with, and the record names, the cell's own.
        precision.apply()
        package = home / "model.pt2"
        compiled = torch._inductor.aoti_load_package(str(package))

        def step():
            with torch.inference_mode():
                return example.call(compiled)

        def infer(ex):  # the package was compiled for these shapes
            with torch.inference_mode():
                return ex.to(cell.device).cast(torch_dtype(cell.precision)).call(compiled)

        return Prepared(
            step,
            {
                **record,
                **configs,
                "inputs_passed": "by name" if example.keyword else "by position",
                "package_bytes": package.stat().st_size,
                "cache": "fresh per prepare" if ctx.cache is None else "package per cell",
                **isa,
                "grad_mode": "inference_mode",
                "torch": torch.__version__,
                **precision.details(),
            },
            infer=infer,
        )
