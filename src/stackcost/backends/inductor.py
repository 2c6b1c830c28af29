"""TorchInductor via torch.compile: Dynamo captures the graph, Inductor generates C++/Triton."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from typing import Any

from stackcost.backends.base import (
    FLAG,
    Availability,
    Backend,
    Capabilities,
    Option,
    Prepared,
    TrainPrepared,
)
from stackcost.backends.torch_common import (
    LAYOUT_OPTION,
    REDUCE_OPTION,
    cast,
    evaluator,
    numerics,
    probe_vec_isa,
    quantized,
    torch_dtype,
    train_step,
)
from stackcost.quantize.pytorch import COMPILED_PATHS


class InductorBackend(Backend):
    name = "inductor"
    omp_threads = True
    description = "torch.compile with the Inductor backend (compiles on the first call)"
    capabilities = Capabilities(
        modes=frozenset({"infer", "train"}),
        devices=frozenset({"cpu", "cuda"}),
        precisions=frozenset({"fp32", "tf32", "bf16", "amp", *COMPILED_PATHS}),
    )
    generator = "stackcost.generation.inductor:InductorGenerator"
    # freezing=true folds weights into the graph as constants (what TorchBench's CPU
    # inference runs use); torch's default is false, so that is ours too.
    options = {
        # torch._inductor.list_mode_options' modes.
        "mode": Option(
            "default", ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
        ),
        "freezing": Option("false", FLAG),
        "layout_optimization": LAYOUT_OPTION,
        "reduce_range": REDUCE_OPTION,
    }

    def available(self) -> Availability:
        if shutil.which("g++") is None and shutil.which("c++") is None:
            return Availability(False, "no C++ compiler: apt-get install g++")
        return Availability.needs_modules("torch", install="pip install torch")

    def _fresh_cache(self, ctx, cell=None) -> tuple[str, dict]:
        """Inductor's kernel cache for this compile, and what to record of it.

        Inductor caches compiled kernels across processes (in /tmp by default); a cache of
        this cell's own keeps the cold start a real compile rather than an earlier run's
        hit. With the run's artifact cache (inference), the cell's later repetitions share
        the first one's: their compile is a cache hit, and is labelled reused."""
        import os
        import sys

        import torch

        isa = probe_vec_isa()  # before the cell's cache is set: it goes to the machine's
        if ctx.cache is not None and cell is not None:
            key = {
                "artifact": "inductor-kernels",
                "cell": cell.key(),  # threads too: Inductor bakes the thread count into kernels
                "weights": ctx.weights_digest,
                "torch": torch.__version__,
            }
            cache_dir, reused = ctx.cache.directory(key)
            record = {
                "cache": "shared by the cell's repetitions",
                "artifact": {"key": cache_dir.name, "reused": reused},
            }
        else:
            cache_dir, record = ctx.workdir / "inductor-cache", {"cache": "fresh per prepare"}
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
        if (utils := sys.modules.get("torch._inductor.utils")) is not None:
            utils.clear_caches()  # in-memory caches left by an earlier cell in this process
        return str(cache_dir), {**record, **isa}

    def _layout_optimization(self, cell) -> bool:
        return self.option(cell, "layout_optimization") == "true"  # FLAG: checked with the spec

    def prepare(self, model, example, cell, ctx):
        import torch
        import torch._inductor

        precision = numerics(cell)  # before the compile: Inductor reads the CUDA flags
        cache_dir, cache = self._fresh_cache(ctx, cell)
        mode = self.option(cell, "mode")
        freezing = self.option(cell, "freezing")
        if freezing not in ("true", "false"):
            raise ValueError(f"inductor freezing {freezing!r}: use true or false")
        # torch.compile takes a mode or options, not both: expand the mode into its
        # options so freezing stays local to this compile, not a process-wide config.
        frozen = _pt2e_frozen(cell.precision)
        if frozen is not _unfrozen:
            freezing = "true"
        options = {
            **torch._inductor.list_mode_options(mode),
            "freezing": freezing == "true",
            "layout_optimization": self._layout_optimization(cell),
        }
        model, example = cast(model, example, cell)
        model, record = quantized(
            model, example, cell, ctx, COMPILED_PATHS, self.quantize_scale_error
        )
        # torch.compile only wraps; Dynamo + Inductor run on the first step (the cold start).
        compiled = torch.compile(model, options=options, fullgraph=False, dynamic=False)
        if frozen is not _unfrozen:
            record["freezing_why"] = PT2E_FREEZING

        # amp: Dynamo traces the first call under the autocast it finds (and guards on it),
        # so the compiled graph holds autocast's casts.
        def step():
            with torch.inference_mode(), frozen(), precision.call():
                return example.call(compiled)

        def infer(ex):  # the same shapes: no recompile (dynamic=False)
            with torch.inference_mode(), frozen(), precision.call():
                return ex.to(cell.device).cast(torch_dtype(cell.precision)).call(compiled)

        return Prepared(
            step,
            {
                "mode": mode,
                "freezing": freezing == "true",
                "layout_optimization": options["layout_optimization"],
                "fullgraph": False,
                "dynamic": False,
                **cache,
                "cache_dir": cache_dir,
                "grad_mode": "inference_mode",
                "torch": torch.__version__,
                **precision.details(),
                **record,
            },
            infer=infer,
        )

    def prepare_train(self, model, optimizer_factory, loss_fn, example, cell, ctx):
        import torch
        import torch._inductor

        cache_dir, cache = self._fresh_cache(ctx)
        mode = self.option(cell, "mode")
        if self.option(cell, "freezing") == "true":
            raise ValueError("inductor freezing=true folds weights into constants: cannot train")
        options = {
            **torch._inductor.list_mode_options(mode),
            "layout_optimization": self._layout_optimization(cell),
        }
        # The module is compiled (Dynamo + AOTAutograd give a compiled forward and backward);
        # the loss and the optimizer step stay eager, as in most torch.compile training loops.
        compiled = torch.compile(model, options=options, fullgraph=False, dynamic=False)
        step = train_step(compiled, optimizer_factory(model.parameters()), loss_fn)
        return TrainPrepared(
            step,
            {
                "mode": mode,
                "layout_optimization": options["layout_optimization"],
                "compiled": "module (forward + AOTAutograd backward); loss and optimizer eager",
                # Eval in eager on the same parameters: the compiled module would recompile
                # for eval mode and again for the last, smaller batch.
                "eval_path": "eager",
                "fullgraph": False,
                "dynamic": False,
                **cache,
                "cache_dir": cache_dir,
                "grad_mode": "autograd",
                "torch": torch.__version__,
            },
            evaluate=evaluator(model),
        )


PT2E_FREEZING = (
    "PT2E int8 graphs are compiled frozen, their weights packed for oneDNN once as constants "
    "(unfrozen they are repacked every call: resnet50 int8 ran no faster than fp32); "
    "torchao's weight-pack pass reads Inductor's process config as well as the compile's "
    "options, so each call also runs under torch._inductor.config.patch(freezing=True)"
)


def _unfrozen() -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _pt2e_frozen(precision: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """What each call of a `precision` step runs under: freezing for PT2E's int8 graphs
    (patched per call, so a warm worker's next cell finds the config as it was)."""
    if COMPILED_PATHS.get(precision) != "pt2e":
        return _unfrozen
    import torch._inductor.config

    return lambda: torch._inductor.config.patch(freezing=True)
