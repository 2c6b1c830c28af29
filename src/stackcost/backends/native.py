"""Native rungs: a C++ program measures the model out of Python, with the same protocol.

A NativeBackend's `run_repetition` exports what the program needs (weights or a
TorchScript file, and the inputs, as SCW1 files), runs the program once per repetition,
and hands back its JSON answer as a Run, with every output tensor the program wrote, which
the worker verifies against the eager reference like any other output. Its `breakdown`
reads the timeline the program's profiled pass wrote; `build` compiles the program;
`train_repetition` runs the program's own training loop and turns its answer into the
engine's records.

Which zoo models the programs define follows from each one's family (stackcost.native);
a cell whose model has none they build is `unsupported: no C++ definition of <model>`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from stackcost.backends.base import (
    FLAG,
    Availability,
    Backend,
    Capabilities,
    NoBreakdown,
    Option,
    PrepareContext,
    Run,
    TrainRun,
    Unsupported,
)
from stackcost.native import defined, definition, network_args

if TYPE_CHECKING:
    import torch

    from stackcost.cell import Cell
    from stackcost.data.splits import Split
    from stackcost.measure.protocol import Protocol
    from stackcost.profile.breakdown import Breakdown
    from stackcost.result import EpochRecord
    from stackcost.workload import Example


# How many first losses a training run records: the train scenario's FIRST_LOSSES (a test
# keeps the two equal; this layer cannot import the scenario's).
FIRST_LOSSES = 10


class NativeBackend(Backend):
    target: ClassVar[str]  # the build target in stackcost.native.build
    # None: the default cache (~/.cache/stackcost/native). Tests point it elsewhere.
    cache_dir: ClassVar[Path | None] = None
    # Whether the program builds the network from its own definition (the zoo's family)
    # rather than running an exported graph.
    needs_definition: ClassVar[bool] = True

    def available(self) -> Availability:
        from stackcost.native.build import toolchain_problem

        problem = toolchain_problem(self.target, shutil.which)
        return Availability(problem is None, problem or "")

    def why_not(self, cell: Cell) -> str | None:
        problem = super().why_not(cell)
        if problem is None and self.needs_definition and definition(cell) is None:
            return f"no C++ definition of {cell.model.name} (defined: {', '.join(defined())})"
        return problem

    def build(self, cache_dir: Path | None = None):
        from stackcost.native.build import ensure_built

        return ensure_built(self.target, cache_dir or self.cache_dir)

    def prepare(self, model, example, cell, ctx):
        raise NotImplementedError(f"{self.name} runs out of process: see run_repetition")

    def export(self, model: torch.nn.Module, example: Example, cell: Cell, workdir: Path):
        """Write the model's files into `workdir`; return the program's extra key=values.

        A returned "input_names" (not passed on) orders the input file: the order of the
        exported forward's arguments. Without it, the workload's order."""
        raise NotImplementedError

    def export_folded(
        self, model: torch.nn.Module, example: Example, cell: Cell, workdir: Path
    ) -> dict[str, Any]:
        """A program that builds the network from primitives (onednn, cudnn) takes the
        weights with BatchNorm folded into each convolution and the family's shape."""
        from stackcost.native.tensors import write_tensors

        self.check_arch(cell)
        if len(example.tensors) != 1:
            raise Unsupported(
                f"{self.name} takes one image input; {cell.model.name} has "
                f"{len(example.tensors)} ({', '.join(example.names)})"
            )
        state, folded = folded_state(model)
        write_tensors(workdir / "weights.scw", state)
        return {"weights": workdir / "weights.scw", "folded_bn": folded, **network_args(cell)}

    def run_repetition(
        self, model, example, cell, ctx, protocol, timeout_s=None, profile_iters=0
    ) -> Run:
        # The program runs the whole protocol in its own process and reports its own
        # threads and peak RSS; this process only exports, verifies and summarizes.
        answer = self.run_native(model, example, cell, ctx, protocol, timeout_s, profile_iters)
        return Run(
            native_measurement(answer, protocol),
            native_prepare_s(answer),
            dict(answer["details"]),
            memory=native_memory(answer),
            answer=answer,
        )

    def run_native(
        self,
        model: torch.nn.Module,
        example: Example,
        cell: Cell,
        ctx: PrepareContext,
        protocol: Protocol,
        timeout_s: float | None = None,
        profile_iters: int = 0,
    ) -> dict[str, Any]:
        """Build (or reuse) the program, export, run one repetition, read its answer back.

        answer["output"] is the list of output tensors the program wrote (output0..N-1,
        the output flattened as stackcost.verify.leaves does). With profile_iters > 0 the
        program then runs that many profiled iterations and writes their timeline to
        answer["profile_path"], which `breakdown` reads."""
        import time

        from scipy.special import ndtri

        from stackcost.native.tensors import read_tensors, write_tensors

        build = self.build()
        workdir = Path(ctx.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        extra = self.export(model, example, cell, workdir)
        order = extra.pop("input_names", None) or list(example.names)
        named = example.named()
        write_tensors(workdir / "input.scw", {n: named[n] for n in order}, keep_dtype=True)
        export_s = time.perf_counter() - t
        p = protocol
        args = {
            **extra,
            "input": workdir / "input.scw",
            "output": workdir / "output.scw",
            "threads": cell.threads,
            "device": cell.device,
            "min_time_s": p.min_time_s,
            "min_iters": p.min_iters,
            "max_time_s": p.max_time_s,
            "max_iters": p.max_iters,
            "target_ci": p.target_ci,
            "z": float(ndtri(1 - (1 - p.confidence) / 2)),
            "warmup_tolerance": p.warmup_tolerance,
            "warmup_max_time_s": p.warmup_max_time_s,
            "check_interval_s": p.check_interval_s,
        }
        if profile_iters > 0:
            args["profile_iters"] = profile_iters
            args["profile_out"] = workdir / "profile.json"
        answer = self._invoke(build.executable, "run", args, timeout_s)
        if profile_iters > 0:
            answer["profile_path"] = workdir / "profile.json"
        answer["output"] = list(read_tensors(workdir / "output.scw").values())
        answer["details"].update(_build_details(build, export_s))
        return answer

    def _invoke(
        self, executable: Path, command: str, args: dict[str, Any], timeout_s: float | None
    ) -> dict[str, Any]:
        """Run `executable command key=value...`; its last stdout line is the JSON answer.

        A non-zero exit raises with the program's last stderr line (it prints one line,
        "error: ...", for anything it rejects), so the cell fails with that reason.
        """
        import time

        cmd = [str(executable), command, *(f"{k}={v}" for k, v in args.items())]
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        if out.returncode != 0:
            tail = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            raise RuntimeError(f"{executable.name}: {tail}")
        answer = json.loads(out.stdout.strip().splitlines()[-1])
        answer["process_s"] = time.perf_counter() - t
        return answer

    def train_repetition(
        self,
        model: torch.nn.Module,
        splits: dict[str, Split],
        cell: Cell,
        ctx: PrepareContext,
        timeout_s: float | None = None,
    ) -> TrainRun:
        """The program runs every epoch itself; this process only writes its files."""
        from stackcost.measure.counters import Edge, Window

        # The program's whole run is the window: its CPU arrives as a reaped child's.
        first = Edge.now()
        train, test = splits["train"].dataset, splits["test"].dataset
        if train is None or test is None:  # why_not refuses non-image models before this
            raise ValueError(f"{self.name} trains on image datasets only")
        answer = self.run_native_train(
            model, (train.images, train.labels), (test.images, test.labels), cell, ctx, timeout_s
        )
        window = Window.between(first, Edge.now())
        details = answer["details"]
        return TrainRun(
            epochs=epoch_records(answer, cell.device),
            samples_ns=[int(s) for s in answer["samples_ns"]],
            cold_ns=int(answer["cold_ns"]),
            prepare_s=details["build_s"] + details["export_s"],
            timed_s=answer["process_s"],
            details=details,
            # The first steps' losses, as the train scenario records eager's: the train
            # table's agreement with eager (report/frames/train.py) reads them.
            loop={
                "loop": "in the C++ program",
                "first_losses": [float(v) for v in answer["losses"][:FIRST_LOSSES]],
            },
            memory=native_memory(answer),
            window=window,
            diverged=answer.get("diverged") or "",
        )

    def run_native_train(
        self,
        model: torch.nn.Module,
        train: tuple[Any, Any],
        test: tuple[Any, Any],
        cell: Cell,
        ctx: PrepareContext,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Build (or reuse) the program, write its training files, run the whole loop."""
        import time

        from stackcost.native.training import epoch_orders, train_args, write_train_files

        assert cell.train is not None
        self.check_arch(cell)
        build = self.build()
        workdir = Path(ctx.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        orders = epoch_orders(len(train[1]), cell.train.epochs, cell.train.data_seed)
        files = write_train_files(workdir, model.state_dict(), train, test, orders)
        export_s = time.perf_counter() - t
        args = {**train_args(cell, files), "device": cell.device}
        answer = self._invoke(build.executable, "train", args, timeout_s)
        answer["details"].update(_build_details(build, export_s))
        return answer

    def breakdown(self, run: Run, cell: Cell, iters: int) -> Breakdown:
        """The profiled pass's split of the step, from the timeline the program wrote; the
        unprofiled reference is the program's own timed median."""
        if run.answer is None:
            raise NoBreakdown(f"{self.name} ran no program")
        stats = run.measurement.stats
        try:
            return self.timeline_breakdown(run.answer, stats.median_ms if stats else None)
        except (NotImplementedError, RuntimeError) as exc:  # no pass, or an unreadable file
            raise NoBreakdown(str(exc)) from exc

    def timeline_breakdown(self, answer: dict[str, Any], unprofiled_ms: float | None) -> Breakdown:
        """Read the program's profiled-pass timeline (answer["profile_path"])."""
        raise NotImplementedError(f"{self.name} has no profiled pass")

    def check_arch(self, cell: Cell) -> None:
        """Raise Unsupported unless the program may run the cell's network."""
        problem = self.why_not(cell)
        if problem is not None:
            raise Unsupported(problem)


def _build_details(build: Any, export_s: float) -> dict[str, Any]:
    return {
        "build_key": build.key,
        "build_compiled": build.compiled,
        "build_s": round(build.seconds, 3),
        "export_s": round(export_s, 3),
        "executable": str(build.executable),
    }


class LibTorchProgram(NativeBackend):
    """Both rungs of stackcost_libtorch: its profiled pass is a Kineto trace."""

    target = "libtorch"

    def timeline_breakdown(self, answer, unprofiled_ms):
        from stackcost.profile.kineto_trace import kineto_breakdown

        return kineto_breakdown(answer, unprofiled_ms)


class LibTorchBackend(LibTorchProgram):
    name = "libtorch"
    description = (
        "LibTorch C++: the zoo architectures re-defined with torch::nn "
        "(the zoo's families), no Python"
    )
    # CUDA where torch::cuda::is_available(): the program moves module and data to the GPU.
    capabilities = Capabilities(
        modes=frozenset({"infer", "train"}), devices=frozenset({"cpu", "cuda"})
    )

    def export(self, model, example, cell, workdir):
        from stackcost.native.tensors import write_tensors

        self.check_arch(cell)
        if len(example.tensors) != 1:
            raise Unsupported(
                f"{self.name} takes one image input; {cell.model.name} has "
                f"{len(example.tensors)} ({', '.join(example.names)})"
            )
        write_tensors(workdir / "weights.scw", model.state_dict())
        return {"kind": "nn", "weights": workdir / "weights.scw", **network_args(cell)}


class TorchScriptCppBackend(LibTorchProgram):
    name = "torchscript-cpp"
    description = (
        "TorchScript exported from Python (trace, freeze), run by torch::jit from C++ "
        "(optimize_for_inference applied there)"
    )
    capabilities = Capabilities(devices=frozenset({"cpu", "cuda"}))
    # The Python torchscript rung's defaults, so the two differ only by the language.
    options = {"freeze": Option("true", FLAG), "optimize": Option("true", FLAG)}

    def check_options(self, given):
        from stackcost.backends.torchscript import graph_flags_problem

        return super().check_options(given) or graph_flags_problem(self.name, given)

    needs_definition = False  # runs whatever traces, any inputs and outputs

    def export(self, model, example, cell, workdir):
        import warnings

        import torch

        from stackcost.backends.torchscript import graph_flags, trace

        freeze, optimize = graph_flags(self, cell)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated
            module = trace(model, example)
            if freeze:
                module = torch.jit.freeze(module)
            module.save(str(workdir / "model.pt"))
        # An optimized module saves but does not load back (torch 2.13: "required keyword
        # attribute 'value' is undefined"), so the program optimizes after loading.
        return {
            "kind": "jit",
            "module": workdir / "model.pt",
            "optimize": int(optimize),
            "input_names": forward_order(module, example),
        }


def forward_order(module: Any, example: Example) -> list[str]:
    """The example's input names in the order the traced forward takes them: the
    workload's for positional inputs, the forward schema's for keyword inputs (a trace with
    example_kwarg_inputs orders them by the model's signature)."""
    if not example.keyword:
        return list(example.names)
    schema = [a.name for a in module.forward.schema.arguments[1:]]  # [0] is self
    missing = [n for n in schema if n not in example.names]
    if missing or len(schema) != len(example.names):
        raise RuntimeError(
            f"traced forward takes ({', '.join(schema)}), the workload gives "
            f"({', '.join(example.names)})"
        )
    return schema


def folded_state(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], int]:
    """The tensors stackcost_onednn and stackcost_cudnn read: each Conv2d as
    "<conv>.folded_weight" and "<conv>.folded_bias" with its eval-mode BatchNorm folded in
    (computed in float64, on the model's device), and every Linear's weight and bias under
    its state_dict name.

    The BatchNorm that follows a conv is found by the zoo's naming: "...convN" -> "...bnN",
    "...downsample.0" -> "...downsample.1". A conv without one (mnist-cnn) gets its own
    bias, or zeros. Also returns how many BatchNorms were folded.
    """
    import torch
    from torch import nn

    modules = dict(model.named_modules())
    out: dict[str, torch.Tensor] = {}
    folded = 0
    for name, module in modules.items():
        if isinstance(module, nn.Linear):
            out[f"{name}.weight"] = module.weight.detach().clone()
            out[f"{name}.bias"] = module.bias.detach().clone()
        if not isinstance(module, nn.Conv2d):
            continue
        head, _, leaf = name.rpartition(".")
        bn_leaf = "1" if leaf == "0" else leaf.replace("conv", "bn", 1)
        bn = modules.get(f"{head}.{bn_leaf}" if head else bn_leaf)
        w = module.weight.detach().double()
        b = (
            module.bias.detach().double()
            if module.bias is not None
            else torch.zeros(w.shape[0], dtype=torch.float64, device=w.device)
        )
        if isinstance(bn, nn.BatchNorm2d):
            assert bn.running_mean is not None and bn.running_var is not None
            scale = bn.weight.detach().double() / torch.sqrt(bn.running_var.double() + bn.eps)
            w = w * scale[:, None, None, None]
            b = (b - bn.running_mean.double()) * scale + bn.bias.detach().double()
            folded += 1
        out[f"{name}.folded_weight"] = w.float()
        out[f"{name}.folded_bias"] = b.float()
    return out, folded


class OneDNNBackend(NativeBackend):
    name = "onednn"
    description = (
        "oneDNN primitives from C++: BN folded into conv, ReLU/residual as post-ops, "
        "layouts chosen by oneDNN"
    )
    capabilities = Capabilities(modes=frozenset({"infer", "train"}))  # cpu, fp32
    target = "onednn"

    def export(self, model, example, cell, workdir):
        return self.export_folded(model, example, cell, workdir)

    def timeline_breakdown(self, answer, unprofiled_ms):
        from stackcost.profile.primitive_timers import primitive_breakdown

        return primitive_breakdown(answer, unprofiled_ms)


# -- turning the program's answer into the engine's records -----------------------------------


def native_measurement(answer: dict[str, Any], protocol: Protocol):
    """The C++ JSON as a protocol Measurement; stats recomputed here (exact binomial CI)."""
    from stackcost.measure.protocol import Measurement
    from stackcost.measure.stats import summarize

    samples = [int(s) for s in answer["samples_ns"]]
    return Measurement(
        cold_ns=int(answer["cold_ns"]),
        output=answer["output"],
        warmup_iters=int(answer["warmup_iters"]),
        warmup_s=float(answer["warmup_s"]),
        warmup_settled=bool(answer["warmup_settled"]),
        samples_ns=samples,
        timed_s=float(answer["timed_s"]),
        stats=summarize(samples, protocol.confidence),
        stop_reason=str(answer["stop_reason"]),
        window=native_window(answer),
    )


def native_window(answer: dict[str, Any]):
    """The program's timed loop on CLOCK_MONOTONIC with its own CPU counters; None from a
    program built before it reported them."""
    from stackcost.measure.counters import Window

    w = answer.get("window")
    if not w:
        return None

    def read(key: str, kind: type = float):  # None: unread, or a program built before it
        value = w.get(key)
        return None if value is None else kind(value)

    return Window(
        int(w["start_ns"]),
        int(w["end_ns"]),
        float(w["cpu_s"]),
        read("system_busy_s"),
        steal_s=read("steal_s"),
        involuntary_switches=read("involuntary_switches", int),
        cpu_mhz_start=read("cpu_mhz_start"),
        cpu_mhz_end=read("cpu_mhz_end"),
    )


def native_prepare_s(answer: dict[str, Any]) -> float:
    """Time to the first call, cold call excluded: build lookup (or compile), export, and the
    program's own start (loading libtorch, the module and the weights)."""
    d = answer["details"]
    measured = answer["cold_ns"] / 1e9 + answer["warmup_s"] + answer["timed_s"]
    return d["build_s"] + d["export_s"] + max(0.0, answer["process_s"] - measured)


def native_memory(answer: dict[str, Any]):
    from stackcost.result import Memory

    baseline, peak = int(answer["baseline_rss_bytes"]), int(answer["peak_rss_bytes"])
    return Memory(
        baseline_rss_bytes=baseline,
        peak_rss_bytes=peak,
        peak_over_baseline_bytes=peak - baseline,
        method="VmHWM of the C++ process (baseline: RSS before the model is built)",
    )


def epoch_records(answer: dict[str, Any], device: str = "cpu") -> list[EpochRecord]:
    """The training program's per-epoch counts as the engine's EpochRecords (means
    computed here)."""
    from stackcost.result import EpochRecord

    records = []
    for e in answer["epochs"]:
        steps, seen = int(e["steps"]), int(e["train_samples"])
        train_s, step_s = e["train_ns"] / 1e9, e["step_ns"] / 1e9
        n_eval = int(e.get("eval_samples", 0))
        eval_s = e["eval_ns"] / 1e9 if n_eval else None
        records.append(
            EpochRecord(
                epoch=int(e["epoch"]),
                complete=bool(e["complete"]),
                steps=steps,
                train_samples=seen,
                train_loss=e["train_loss_sum"] / max(steps, 1),
                train_accuracy=e["train_correct"] / max(seen, 1),
                eval_accuracy=e["eval_correct"] / n_eval if n_eval else None,
                eval_loss=e["eval_loss_sum"] / n_eval if n_eval else None,
                eval_samples=n_eval,
                epoch_s=train_s + (eval_s or 0.0),
                train_s=train_s,
                loader_wait_s=e["loader_ns"] / 1e9,
                step_s=step_s,
                eval_s=eval_s,
                train_samples_per_s=seen / train_s if train_s > 0 else 0.0,
                eval_samples_per_s=n_eval / eval_s if eval_s else None,
                # A program that copies each batch to a device (stackcost_cudnn) says how
                # much and how long; otherwise the batch is gathered in its own memory.
                copy_bytes_per_batch=float(e.get("copy_bytes_per_batch", 0)),
                copy_ms_per_batch=e.get("copy_ns", 0) / 1e6 / max(steps, 1),
                copy_device=device,
                copy_pinned=False if "copy_bytes_per_batch" in e else None,
            )
        )
    return records
