"""The child processes of agreement.py: each call is one fresh interpreter doing one thing.

    python _agreement_peers.py prepare --out DIR [--model M] [--input-shape S] \
        [--resolution R] --batch-sizes 1,8 --threads T
    python _agreement_peers.py torch --prepared DIR/b1 [--model M ...] [--backend inductor] \
        --batch-size B --threads T --min-time S --result PATH
    python _agreement_peers.py onnxruntime --prepared DIR/b1 --threads T --min-time S \
        --result PATH
    python _agreement_peers.py triton --prepared DIR/b1 --resolution R --batch-size B \
        --threads T --min-time S --device cuda --result PATH

`prepare` builds --model (resnet18 by default; a zoo name, or module:factory with
--input-shape) exactly as a stackcost worker does (zoo.build_model: seeded
weights; workload.make_example: seeded inputs), exports it once per batch size with
stackcost's own exporter (dynamo, legacy fallback), and saves the inputs and eager fp32's
outputs. The torch and ONNX Runtime peers reuse that directory and report how far their
outputs are from eager's, so "the same model" is checked, not assumed. (benchmark_app
fills its inputs with random values: its .bin reader fills a batch from one scalar per
sample, and a convolution's time does not depend on the values.)

`torch` times the eager backend's own step (torch.inference_mode around the model call),
or with --backend inductor the step inductor compiled in the peer's process, with
torch.utils.benchmark.Timer.blocked_autorange; `onnxruntime` is the loop anyone would
write: a default InferenceSession with intra_op_num_threads set, timed call by call with
time.perf_counter. Each writes one JSON object to --result.

With --device cuda, `torch` and `triton` put the model and inputs on the GPU as a stackcost
worker does and take the eager backend's step, which sets the cell's CUDA math flags (fp32:
TF32 off for matmuls and cuDNN convolutions); Timer synchronizes around each block of calls
when CUDA is there. `triton` times that step with triton.testing.do_bench (CUDA events
around each call; do_bench clears L2 before every call, stackcost's loop does not). `prepare
--no-onnx` skips the export the cuda peers do not load.

`--serve-fd FD` (agreement.py's bursts design): instead of one timed run, the peer warms up
and then serves bursts over stackcost's burst protocol (measure/bursts.py: commands on
stdin, replies on FD), alternating with a stackcost worker of the same cell. Each burst
starts with an untimed call, as stackcost's paced worker's does (WAKE_STEPS), and ONNX
Runtime's idle threads sleep (allow_spinning 0) as in stackcost's paced session. Each peer
times a burst its own way: torch.utils.benchmark.Timer.timeit(N) (which runs max(N // 100,
2) untimed warm calls first, as it always does), perf_counter around each ONNX Runtime
run(), and OpenVINO's own `InferRequest.latency` of each sync `infer()`, which is what
benchmark_app's sync loop records. benchmark_app itself runs its whole loop in one call and
cannot be paced; `openvino` compiles the graph with the properties benchmark_app sets for
`-hint none -nstreams 1 -nthreads T -infer_precision f32` and runs its loop body.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _subject(args: argparse.Namespace, batch_size: int):
    """The model and inputs a stackcost worker builds for this cell: --model (a zoo name, or
    module:factory with --input-shape), at --resolution where it has that axis (0: its
    default), every other size axis at its default, as RunSpec.cells() makes them."""
    from stackcost import zoo
    from stackcost.runspec.run import model_ref
    from stackcost.workload import make_example

    shape = tuple(int(d) for d in args.input_shape.split(",")) if args.input_shape else None
    ref = model_ref(args.model, input_shape=shape)
    workload = zoo.workload_of(ref)
    sizes = {
        a: args.resolution if a == "resolution" and args.resolution else workload.sizes[a]
        for a in workload.axes
    }
    model = zoo.build_model(ref, sizes, workload)
    example = make_example(workload, ref, batch_size, sizes)
    return ref, sizes, model, example


def _max_abs_err(outputs: list[Any], reference: Path) -> float:
    import numpy as np

    with np.load(reference) as saved:
        expected = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    return max(
        float(np.max(np.abs(np.asarray(o, dtype=np.float64) - e)))
        for o, e in zip(outputs, expected, strict=True)
    )


def prepare(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from stackcost import zoo
    from stackcost.backends.onnx_export import export_onnx
    from stackcost.verify import leaves

    torch.set_num_threads(args.threads)
    out: dict[str, Any] = {}
    for bs in (int(b) for b in args.batch_sizes.split(",")):
        home = Path(args.out) / f"b{bs}"
        (home / "onnx").mkdir(parents=True, exist_ok=True)
        _, _, model, example = _subject(args, bs)
        with torch.inference_mode():
            reference = [np.asarray(a) for _, a in leaves(example.call(model))]
        np.savez(home / "reference.npz", *reference)
        inputs = {n: t.detach().contiguous().numpy() for n, t in example.named().items()}
        np.savez(home / "inputs.npz", **inputs)
        details: dict[str, Any] = {"exporter": "none (--no-onnx)"}
        if not args.no_onnx:
            details = export_onnx(model, example, home / "onnx" / "model.onnx", "dynamo", True)
        out[str(bs)] = {
            "dir": str(home),
            "onnx_path": str(home / "onnx" / "model.onnx"),
            "inputs": {n: list(a.shape) for n, a in inputs.items()},
            "weights_digest": zoo.weights_digest(model),
            **details,
        }
    Path(args.result).write_text(json.dumps(out, indent=2))
    return 0


def _eager_step(args: argparse.Namespace):
    """The --backend's step (eager, or inductor's compiled one) for this cell on --device,
    as a stackcost worker builds it (model and inputs moved to the device before prepare);
    its model and max abs error."""
    import torch

    from stackcost.backends import PrepareContext, load_backend
    from stackcost.cell import Cell
    from stackcost.verify import leaves

    torch.set_num_threads(args.threads)
    ref, sizes, model, example = _subject(args, args.batch_size)
    cell = Cell(
        model=ref, backend=args.backend, batch_size=args.batch_size,
        sizes=sizes, threads=args.threads, device=args.device,
    )  # fmt: skip
    device = torch.device(args.device)
    on_device, example = model.to(device), example.to(device)
    context = PrepareContext(Path(args.result).parent)
    step = load_backend(args.backend).prepare(on_device, example, cell, context).step
    err = _max_abs_err([a for _, a in leaves(step())], args.reference)
    return step, model, err


def _serve(args: argparse.Namespace, burst: Callable[[int], list[float]]) -> dict[str, Any]:
    """Warm up for --warmup seconds, then serve the parent's bursts on the burst protocol:
    `burst(n)` times n calls the peer's own way, returning ns per call (or one mean per
    call for a peer that times blocks). Each burst's disturbance is read as a stackcost
    worker reads its own (measure/disturbance.py). The bursts' summary."""
    from stackcost.measure.counters import Edge, Window
    from stackcost.measure.disturbance import assess

    end = time.perf_counter() + args.warmup
    while time.perf_counter() < end:
        burst(1)
    replies = os.fdopen(args.serve_fd, "w")

    def send(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    send({"ready": statistics.median(v for _ in range(3) for v in burst(1))})
    samples: list[float] = []
    bursts = disturbed = 0
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("stop"):
            break
        edge = Edge.now()
        ns = burst(int(command["burst"]))
        reading = assess(Window.between(edge, Edge.now()))
        samples += ns
        bursts += 1
        disturbed += bool(reading and reading.disturbed)
        send({"ns": ns, "disturbed": bool(reading and reading.disturbed),
              "others_cores": reading.others_cores if reading else None})  # fmt: skip
    replies.close()
    return {
        "bursts": bursts,
        "disturbed_bursts": disturbed,
        "median_ms": statistics.median(samples) / 1e6 if samples else None,
        "n": len(samples),
    }


def peer_torch(args: argparse.Namespace) -> int:
    import torch
    import torch.utils.benchmark as tb

    from stackcost import zoo

    step, model, err = _eager_step(args)
    timer = tb.Timer(stmt="step()", globals={"step": step}, num_threads=args.threads)
    if args.serve_fd is not None:  # one mean per call for each burst: Timer times blocks
        served = _serve(args, lambda n: [timer.timeit(n).mean * 1e9])
        timing = served | {"block_size": "the burst's"}
    else:
        m = timer.blocked_autorange(min_run_time=args.min_time)
        timing = {
            "median_ms": m.median * 1e3,  # median of per-block means
            "mean_ms": m.mean * 1e3,
            "iqr_ms": m.iqr * 1e3,
            "n": len(m.times),
            "block_size": m.number_per_run,
        }
    result = {
        "peer": "torch.utils.benchmark",
        "backend": args.backend,
        **timing,
        "weights_digest": zoo.weights_digest(model),
        "max_abs_err": err,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "torch": torch.__version__,
    }
    Path(args.result).write_text(json.dumps(result))
    return 0


def peer_triton(args: argparse.Namespace) -> int:
    import torch

    if not args.device.startswith("cuda") or not torch.cuda.is_available():
        print(
            "triton.testing.do_bench times with CUDA events: it needs a CUDA device",
            file=sys.stderr,
        )
        return 2
    import triton
    from triton.testing import do_bench

    from stackcost import zoo

    step, model, err = _eager_step(args)
    # warmup and rep are milliseconds of calls, as do_bench counts them.
    median, q25, q75 = do_bench(
        step, warmup=500, rep=max(int(args.min_time * 1e3), 100), quantiles=[0.5, 0.25, 0.75]
    )
    result = {
        "peer": "triton.testing.do_bench",
        "median_ms": median,  # median of single calls, each between CUDA events, L2 cleared
        "iqr_ms": q75 - q25,
        "warmup_ms": 500,
        "rep_ms": max(int(args.min_time * 1e3), 100),
        "weights_digest": zoo.weights_digest(model),
        "max_abs_err": err,
        "device": args.device,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    Path(args.result).write_text(json.dumps(result))
    return 0


def peer_onnxruntime(args: argparse.Namespace) -> int:
    import numpy as np
    import onnxruntime as ort

    home = Path(args.prepared)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    if args.serve_fd is not None:
        # Idle threads sleep, as in stackcost's paced worker: a pool spinning between its
        # bursts would take the cores from the other side's.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(
        str(home / "onnx" / "model.onnx"), so, providers=["CPUExecutionProvider"]
    )
    with np.load(home / "inputs.npz") as saved:
        feeds = {i.name: saved[i.name] for i in sess.get_inputs()}
    err = _max_abs_err(sess.run(None, feeds), home / "reference.npz")
    if args.serve_fd is not None:

        def burst(n: int) -> list[float]:
            sess.run(None, feeds)  # untimed: the burst's wake-up (measure/bursts.WAKE_STEPS)
            ns = []
            for _ in range(n):
                t0 = time.perf_counter_ns()
                sess.run(None, feeds)
                ns.append(float(time.perf_counter_ns() - t0))
            return ns

        result = {"peer": "onnxruntime loop", **_serve(args, burst), "max_abs_err": err,
                  "intra_op_threads": sess.get_session_options().intra_op_num_threads,
                  "onnxruntime": ort.__version__}  # fmt: skip
        Path(args.result).write_text(json.dumps(result))
        return 0
    # Warm up for a fixed half second (ORT's first calls allocate and pick kernels).
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:
        sess.run(None, feeds)
    samples: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < args.min_time or len(samples) < 10:
        t0 = time.perf_counter()
        sess.run(None, feeds)
        samples.append(time.perf_counter() - t0)
    q = statistics.quantiles(samples, n=4)
    result = {
        "peer": "onnxruntime loop",
        "median_ms": statistics.median(samples) * 1e3,
        "mean_ms": statistics.fmean(samples) * 1e3,
        "iqr_ms": (q[2] - q[0]) * 1e3,
        "n": len(samples),
        "max_abs_err": err,
        "intra_op_threads": sess.get_session_options().intra_op_num_threads,
        "onnxruntime": ort.__version__,
    }
    Path(args.result).write_text(json.dumps(result))
    return 0


# What benchmark_app sets for -hint none -nstreams 1 -nthreads T -infer_precision f32 (the
# processes design runs benchmark_app itself with those flags).
def _benchmark_app_config(threads: int) -> dict[str, Any]:
    return {"NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}


def peer_openvino(args: argparse.Namespace) -> int:
    import numpy as np
    import openvino as ov

    if args.serve_fd is None:
        print("the openvino peer serves bursts only: otherwise run benchmark_app", file=sys.stderr)
        return 2
    home = Path(args.prepared)
    core = ov.Core()
    compiled = core.compile_model(
        str(home / "onnx" / "model.onnx"), "CPU", _benchmark_app_config(args.threads)
    )
    request = compiled.create_infer_request()
    with np.load(home / "inputs.npz") as saved:
        for port in compiled.inputs:
            request.set_tensor(port, ov.Tensor(np.ascontiguousarray(saved[port.any_name])))
    request.infer()
    err = _max_abs_err([request.get_output_tensor(i).data.copy()
                        for i in range(len(compiled.outputs))], home / "reference.npz")  # fmt: skip

    def burst(n: int) -> list[float]:
        request.infer()  # untimed: the burst's wake-up (measure/bursts.WAKE_STEPS)
        ns = []
        for _ in range(n):
            request.infer()
            ns.append(request.latency * 1e6)  # OpenVINO's own latency, in ms
        return ns

    config = {k: str(compiled.get_property(k)) for k in (
        "NUM_STREAMS", "INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT",
        "ENABLE_CPU_PINNING", "OPTIMAL_NUMBER_OF_INFER_REQUESTS")}  # fmt: skip
    result = {"peer": "openvino sync loop (benchmark_app's)", **_serve(args, burst),
              "max_abs_err": err, "config": config, "openvino": ov.__version__}  # fmt: skip
    Path(args.result).write_text(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="resnet18", help="a zoo name, or module:factory")
    p.add_argument("--input-shape", help="a factory's sample shape, e.g. 3,56,56")
    p.add_argument("--resolution", type=int, default=0, help="px, where the model has it")
    p.add_argument("--batch-sizes", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--no-onnx", action="store_true", help="skip the export (cuda peers)")
    for name in ("torch", "onnxruntime", "openvino", "triton"):
        p = sub.add_parser(name)
        p.add_argument("--prepared", type=Path, required=True, help="prepare's dir for the batch")
        p.add_argument("--model", default="resnet18", help="a zoo name, or module:factory")
        p.add_argument("--input-shape", help="a factory's sample shape, e.g. 3,56,56")
        p.add_argument("--backend", default="eager", help="torch: eager or inductor's step")
        p.add_argument("--resolution", type=int, default=0, help="px, where the model has it")
        p.add_argument("--batch-size", type=int, required=True)
        p.add_argument("--threads", type=int, required=True)
        p.add_argument("--min-time", type=float, required=True)
        p.add_argument("--device", default="cpu", help="cpu (default) or cuda (torch, triton)")
        p.add_argument("--result", required=True)
        p.add_argument("--serve-fd", type=int, help="serve bursts, replying on this descriptor")
        p.add_argument("--warmup", type=float, default=1.0, help="seconds of warm calls first")
        p.add_argument("--import-torch", action="store_true",
                       help="import torch first, as a stackcost worker has it loaded")  # fmt: skip
    args = ap.parse_args(argv)
    if getattr(args, "import_torch", False):
        import torch  # noqa: F401 - its libraries loaded, as in stackcost's worker
    if args.command != "prepare":
        args.reference = args.prepared / "reference.npz"
    peers = {"torch": peer_torch, "onnxruntime": peer_onnxruntime, "openvino": peer_openvino,
             "triton": peer_triton}  # fmt: skip
    return {"prepare": prepare, **peers}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
