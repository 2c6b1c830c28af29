"""PyTorch eager: the reference rung every other backend is compared against."""

from __future__ import annotations

from stackcost.backends.base import Backend, Capabilities, Prepared, TrainPrepared
from stackcost.backends.torch_common import (
    cast,
    evaluator,
    numerics,
    quantized,
    torch_dtype,
    train_step,
)
from stackcost.quantize.pytorch import EAGER_NO_INT8, EAGER_PATHS


class EagerBackend(Backend):
    name = "eager"
    omp_threads = True
    description = "PyTorch eager mode (torch.inference_mode)"
    capabilities = Capabilities(
        modes=frozenset({"infer", "train"}),
        devices=frozenset({"cpu", "cuda"}),
        precisions=frozenset({"fp32", "tf32", "bf16", "fp16", "amp", *EAGER_PATHS}),
        precision_reasons=(("int8", EAGER_NO_INT8),),
    )
    generator = "stackcost.generation.eager:EagerGenerator"

    def prepare(self, model, example, cell, ctx):
        import torch

        precision = numerics(cell)
        model, example = cast(model, example, cell)
        model, record = quantized(model, example, cell, ctx, EAGER_PATHS, self.quantize_scale_error)

        def step():
            with torch.inference_mode(), precision.call():
                return example.call(model)

        def infer(ex):
            with torch.inference_mode(), precision.call():
                return ex.to(cell.device).cast(torch_dtype(cell.precision)).call(model)

        details = {"grad_mode": "inference_mode", **precision.details(), **record}
        return Prepared(step, details, infer=infer)

    def prepare_train(self, model, optimizer_factory, loss_fn, example, cell, ctx):
        step = train_step(model, optimizer_factory(model.parameters()), loss_fn)
        return TrainPrepared(step, {"grad_mode": "autograd"}, evaluate=evaluator(model))
