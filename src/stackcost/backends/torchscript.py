"""TorchScript: the model as a graph run by the TorchScript interpreter (trace or script)."""

from __future__ import annotations

from stackcost.backends.base import (
    FLAG,
    Availability,
    Backend,
    Capabilities,
    Option,
    Prepared,
    TrainPrepared,
)
from stackcost.backends.torch_common import cast, evaluator, numerics, train_step

_FLAGS = {"true": True, "false": False}
# Why amp is not a TorchScript precision (tried on mnist-cnn, torch 2.13).
NO_AMP = (
    "a trace under torch.autocast bakes the weights' cast copies into the graph as "
    "constants, which torch.jit.trace refused, and torch.jit's own autocast pass is "
    "deprecated with the rest of torch.jit; amp runs on eager, inductor and export-aot"
)


def graph_flags_problem(name: str, given: dict[str, str]) -> str | None:
    """optimize_for_inference works on a frozen module only: asking for both optimize=true
    and freeze=false is a contradiction, refused rather than resolved silently."""
    if given.get("optimize") == "true" and given.get("freeze") == "false":
        return f"option {name}.optimize=true needs {name}.freeze=true (optimizing needs a frozen graph)"
    return None


def graph_flags(backend: Backend, cell) -> tuple[bool, bool]:
    """(freeze, optimize) from the cell's options, for either TorchScript rung.

    optimize_for_inference works on a frozen module only, so optimize implies freeze: an
    explicit freeze=false wins over the optimize default, and asking for both is a
    contradiction rather than something to resolve silently."""
    flags = {}
    for key in ("freeze", "optimize"):
        value = backend.option(cell, key)
        if value not in _FLAGS:
            raise ValueError(f"{backend.name} {key} {value!r}: use true or false")
        flags[key] = _FLAGS[value]
    freeze, optimize = flags["freeze"], flags["optimize"]
    if optimize and not freeze:
        if "optimize" in cell.backend_options:
            raise ValueError(f"{backend.name} optimize=true needs freeze=true")
        optimize = False
    return freeze, optimize


def trace(model, example, **kwargs):
    """torch.jit.trace with the workload's inputs: a tuple, or keyword inputs by name.

    Models that return dicts (Hugging Face ModelOutput) trace with strict=False; the graph
    then returns the same dict, so every output is still compared."""
    import torch

    if example.keyword:
        return torch.jit.trace(model, example_kwarg_inputs=example.kwargs, strict=False, **kwargs)
    return torch.jit.trace(model, example.args, strict=False, **kwargs)


class TorchScriptBackend(Backend):
    name = "torchscript"
    omp_threads = True
    description = "TorchScript (jit.trace or jit.script, frozen, optimize_for_inference)"
    capabilities = Capabilities(
        modes=frozenset({"infer", "train"}),
        devices=frozenset({"cpu", "cuda"}),
        precisions=frozenset({"fp32", "tf32", "bf16"}),
        precision_reasons=(("amp", NO_AMP),),
    )
    options = {
        "variant": Option("trace", ("trace", "script")),
        "freeze": Option("true", FLAG),
        "optimize": Option("true", FLAG),
    }

    def check_options(self, given):
        return super().check_options(given) or graph_flags_problem(self.name, given)

    def available(self) -> Availability:
        return Availability.needs_modules("torch", install="pip install torch")

    def prepare(self, model, example, cell, ctx):
        import warnings

        import torch

        variant = self.option(cell, "variant")
        if variant not in ("trace", "script"):
            raise ValueError(f"torchscript variant {variant!r}: use trace or script")
        freeze, optimize = graph_flags(self, cell)

        precision = numerics(cell)
        model, example = cast(model, example, cell)
        # torch 2.13 deprecates every torch.jit entry point (one warning per call); the rung
        # still measures it, so keep those notices out of the worker's output.
        with torch.no_grad(), warnings.catch_warnings():  # no autograd in the traced graph
            warnings.simplefilter("ignore", DeprecationWarning)
            module, record = self._graph(model, example, cell, ctx, variant)
            if optimize:
                module = torch.jit.optimize_for_inference(torch.jit.freeze(module))
            elif freeze:
                module = torch.jit.freeze(module)

        def step():
            with torch.inference_mode():
                return example.call(module)

        return Prepared(
            step,
            {
                **record,
                "variant": variant,
                "freeze": freeze,
                "optimize": optimize,
                "grad_mode": "inference_mode",
                "torch": torch.__version__,
                **precision.details(),
            },
        )

    @staticmethod
    def _graph(model, example, cell, ctx, variant: str):
        """The traced or scripted module, and what to record of where it came from.

        A trace runs the model three times (once to record, twice to check): at batch 64
        and 224 px that is most of prepare. With the run's artifact cache, the cell's
        first repetition saves its graph and later ones load it; freezing and
        optimize_for_inference run on every repetition (an optimized graph does not load
        back in torch 2.13), so the module measured is built the same way."""
        import torch

        def build():
            return trace(model, example) if variant == "trace" else torch.jit.script(model)

        if ctx.cache is None:
            return build(), {}
        key = {
            "artifact": f"torchscript-{variant}",
            "cell": cell.key(),
            "weights": ctx.weights_digest,
            "torch": torch.__version__,
        }
        made = []

        def make(home):
            made.append(build())
            torch.jit.save(made[0], str(home / "module.pt"))
            return {}

        home, record = ctx.cache.reuse_or_make(key, make)
        if made:
            return made[0], record
        return torch.jit.load(str(home / "module.pt"), map_location=cell.device), record

    def prepare_train(self, model, optimizer_factory, loss_fn, example, cell, ctx):
        import warnings

        import torch

        # Training needs live parameters: no freeze, no optimize_for_inference. Script is
        # tried first (it keeps train/eval control flow); trace is the fallback, unless the
        # user asked for one variant.
        asked = cell.backend_options.get("variant")
        if asked not in (None, "trace", "script"):
            raise ValueError(f"torchscript variant {asked!r}: use trace or script")
        details: dict = {"freeze": False, "optimize": False, "grad_mode": "autograd"}
        module = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            if asked in (None, "script"):
                try:
                    module, variant = torch.jit.script(model), "script"
                except Exception as exc:  # noqa: BLE001 - any scripting error means: trace
                    if asked == "script":
                        raise
                    details["script_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            if module is None:
                # A trace records the train-mode graph (batch statistics in BatchNorm), so
                # evaluation runs the eager module, which shares the traced parameters.
                module, variant = trace(model, example, check_trace=False), "trace"
        shared = all(
            a.data_ptr() == b.data_ptr()
            for a, b in zip(module.parameters(), model.parameters(), strict=True)
        )
        step = train_step(module, optimizer_factory(module.parameters()), loss_fn)
        evaluate = evaluator(module if variant == "script" else model)
        details.update(
            variant=variant,
            variant_source="asked" if asked else ("fallback" if variant == "trace" else "default"),
            eval_path="scripted module" if variant == "script" else "eager (shared parameters)",
            parameters_shared_with_eager=shared,
            torch=torch.__version__,
        )
        return TrainPrepared(step, details, evaluate=evaluate)
