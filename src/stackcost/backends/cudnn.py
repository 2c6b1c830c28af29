"""The cuDNN rung: the zoo's networks from cuDNN 9's legacy API and cuBLAS, in C++, on a GPU.

`stackcost_cudnn` (native/cudnn/) takes the weights stackcost_onednn takes (BatchNorm folded
in Python by `folded_state`), builds resnet (basic/bottleneck, any depths) and mnist-cnn
as a list of cuDNN calls on one stream (ReLU and the residual add fused into
cudnnConvolutionBiasActivationForward, algorithms from cuDNN's heuristics, NCHW, the fully
connected layer as cublasSgemm), and measures them with the shared protocol; the answer
also carries CUDA-event times per call and the program's own device-memory accounting.
With --profile the program times every layer between CUDA events and writes the timeline
stackcost_onednn writes (plus each convolution's algorithm and workspace), which the same
reader (stackcost.profile.primitive_timers) turns into the breakdown.

Training (`stackcost_cudnn train`, native/cudnn/train.cpp) takes what stackcost_onednn's
training takes (NativeBackend's train path writes the same files and arguments, plus
device=cuda): BatchNorm unfolded and in train mode, backward from cuDNN and cuBLAS, SGD or
Adam in the program's own CUDA kernel, fp32 with FMA math (no TF32), on one GPU.

Written and compiled without a GPU: not yet run on one, so nothing it reports is a
measurement until a GPU session has run it.
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import ClassVar

from stackcost.axes import PRECISION_TOLERANCE
from stackcost.backends.base import Availability, Capabilities, Run
from stackcost.backends.native import NativeBackend

# fp32 (CUDNN_FMA_MATH, CUBLAS_PEDANTIC_MATH: no TF32 anywhere), and tf32 (tensor cores
# allowed) where the project's precision axis has it; training is fp32 only.
PRECISIONS = frozenset(p for p in ("fp32", "tf32") if p in PRECISION_TOLERANCE)


class CUDNNBackend(NativeBackend):
    name = "cudnn"
    description = (
        "cuDNN 9 (legacy API) + cuBLAS from C++ on the GPU: BN folded into conv, "
        "bias/ReLU/residual fused, algorithms by cuDNN's heuristics, NCHW; trains with "
        "cuDNN's backward calls (fp32)"
    )
    capabilities = Capabilities(
        modes=frozenset({"infer", "train"}), devices=frozenset({"cuda"}), precisions=PRECISIONS
    )
    target = "cudnn"
    not_yet_run_on_gpu: ClassVar[bool] = True

    def available(self) -> Availability:
        from stackcost.native.build import toolchain_problem

        problem = toolchain_problem(self.target, shutil.which)  # nvcc, cuDNN, cuBLAS, cmake
        if problem:
            return Availability(False, problem)
        if importlib.util.find_spec("torch") is None:
            return Availability(
                False, "torch not installed (it exports the weights): pip install torch"
            )
        import torch

        if not torch.cuda.is_available():
            return Availability(
                False,
                "no CUDA device (torch.cuda.is_available() is False): "
                "run on a machine with an NVIDIA GPU and a CUDA build of torch",
            )
        return Availability(True)

    def why_not(self, cell):
        problem = super().why_not(cell)
        if problem is None and cell.mode == "train" and cell.precision != "fp32":
            return f"precision {cell.precision}: stackcost_cudnn trains in fp32 only"
        return problem

    def export(self, model, example, cell, workdir):
        math = "tf32" if cell.precision == "tf32" else "fp32"
        return {**self.export_folded(model, example, cell, workdir), "math": math}

    def run_repetition(
        self, model, example, cell, ctx, protocol, timeout_s=None, profile_iters=0
    ) -> Run:
        run = super().run_repetition(model, example, cell, ctx, protocol, timeout_s, profile_iters)
        run.details.update(event_summary(run.answer or {}))
        return run

    def timeline_breakdown(self, answer, unprofiled_ms):
        from stackcost.profile.primitive_timers import primitive_breakdown

        # The same file as stackcost_onednn's, one entry per layer timed by CUDA events.
        return primitive_breakdown(answer, unprofiled_ms)


def event_summary(answer: dict) -> dict[str, float | int | str]:
    """The CUDA-event times of the timed calls, beside the wall-clock samples the protocol
    keeps: how many, their median and minimum in ms (the full list stays in the answer)."""
    import statistics

    events = [int(v) for v in answer.get("device_samples_ns") or []]
    if not events:
        return {}
    return {
        "event_samples": len(events),
        "event_median_ms": statistics.median(events) / 1e6,
        "event_min_ms": min(events) / 1e6,
        "event_method": "cudaEventElapsedTime around each timed call (the program's stream)",
    }
