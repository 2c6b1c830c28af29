"""Which int8 scheme should ONNX Runtime use on this CPU? Accuracy and speed of each.

ORT's quantization guide: on x86 without VNNI its U8S8 kernels multiply with VPMADDUBSW,
whose 16-bit sums can saturate; it names two remedies, reduce-range (7-bit weights) and
U8U8 (no saturation). This builds every scheme of `stackcost.quantize.onnx.SCHEMES` for
int8-dyn and int8 on each model, judges each graph as the rung does (max relative error
against fp32 on inputs the calibration never saw, within PRECISION_TOLERANCE), and times
the sessions side by side: rounds of a few calls to each scheme in turn, in one process,
so the machine's drift hits all alike. A scheme's figure is the median of its rounds'
medians; `vs full` is its time over full-range's (below 1: faster). A session's latency
is one process's: compare the schemes within a row, never across runs or machines.

    python benchmarks/int8_schemes.py [--models mlp,mnist-cnn,resnet18] [--threads 2]
        [--rounds 30] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from _figures import write_figures
from stackcost import zoo
from stackcost.axes import PRECISION_TOLERANCE
from stackcost.env import cpu_info
from stackcost.quantize import calibration_set
from stackcost.quantize.onnx import SCHEMES, int8_scheme, quantize_onnx
from stackcost.runspec.run import model_ref
from stackcost.workload import make_example

# (model, resolution, batch): the test suite's tiny graphs and the resnet18 cell.
MODELS = {"mlp": (4, 32), "mnist-cnn": (28, 32), "resnet18": (64, 4)}
PRECISIONS = ("int8-dyn", "int8")
EVAL_SEED = 777  # inputs neither measured nor calibrated on


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=5, help="calls per scheme per round")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/int8_schemes.json"))
    args = parser.parse_args()
    console = Console()
    flags = cpu_info()["flags"]
    console.print(f"CPU flags: {', '.join(flags)}; auto picks {int8_scheme('auto', flags)[0]}")

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            rows += measure(name, Path(tmp) / name, args, console)
    table = Table(title=f"int8 schemes, ONNX Runtime, {args.threads} threads")
    for col in ("model", "precision", "scheme", "max rel err", "rule", "ms (median)", "vs full"):
        table.add_column(col, justify="right" if col in ("max rel err", "ms (median)") else "left")
    for row in rows:
        table.add_row(
            row["model"], row["precision"], row["scheme"], f"{row['rel_err']:.3f}",
            "ok" if row["ok"] else f"wrong (> {row['tolerance']:g})", f"{row['ms']:.3f}",
            f"{row['vs_full']:.2f}",
        )  # fmt: skip
    console.print(table)
    write_figures(args.json, "int8_schemes", {"threads": args.threads, "rows": rows}, console)


def measure(name: str, home: Path, args: argparse.Namespace, console: Console) -> list[dict]:
    import onnxruntime as ort

    from stackcost.backends.onnx_export import export_onnx

    resolution, batch = MODELS[name]
    ref, sizes = model_ref(name), {"resolution": resolution}
    workload = zoo.workload_of(ref)
    example = make_example(workload, ref, batch, sizes)
    held = make_example(workload, ref, batch, sizes, seed=EVAL_SEED)
    src = home / "fp32" / "model.onnx"
    src.parent.mkdir(parents=True)
    export_onnx(zoo.build_model(ref, sizes).eval(), example, src, "dynamo")
    calibration = calibration_set(workload, ref, batch, sizes)

    def feeds(ex: Any) -> dict[str, np.ndarray]:
        return {k: t.numpy() for k, t in ex.named().items()}

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1

    def session(path: Path) -> Any:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    reference = session(src).run(None, feeds(held))[0]
    rows = []
    for precision in PRECISIONS:
        sessions = {}
        for scheme in SCHEMES[1:]:
            dst = home / precision / scheme
            quantize_onnx(src, dst, precision, calibration, feeds, (scheme, "benchmark"))
            sessions[scheme] = session(dst / "model.onnx")
        errors = {
            s: float(np.abs(sess.run(None, feeds(held))[0] - reference).max())
            / float(np.abs(reference).max())
            for s, sess in sessions.items()
        }
        times = interleaved(sessions, feeds(example), args.rounds, args.calls)
        full = times["full-range"]
        for scheme in sessions:
            tol = PRECISION_TOLERANCE[precision]
            rows.append({
                "model": name, "precision": precision, "scheme": scheme, "batch": batch,
                "resolution": resolution, "rel_err": errors[scheme], "tolerance": tol,
                "ok": errors[scheme] <= tol, "ms": times[scheme], "vs_full": times[scheme] / full,
            })  # fmt: skip
        console.print(f"{name} {precision}: done")
    return rows


def interleaved(
    sessions: dict[str, Any], feed: dict[str, np.ndarray], rounds: int, calls: int
) -> dict[str, float]:
    """Each scheme's median over rounds of its median call (ms); the order rotates every
    round so no scheme always follows the same one."""
    for sess in sessions.values():  # warm: first calls pack weights, size arenas
        for _ in range(3):
            sess.run(None, feed)
    medians: dict[str, list[float]] = {s: [] for s in sessions}
    order = list(sessions)
    for r in range(rounds):
        for scheme in order[r % len(order) :] + order[: r % len(order)]:
            sess, took = sessions[scheme], []
            for _ in range(calls):
                start = time.perf_counter()
                sess.run(None, feed)
                took.append(time.perf_counter() - start)
            medians[scheme].append(statistics.median(took) * 1e3)
    return {s: statistics.median(m) for s, m in medians.items()}


if __name__ == "__main__":
    main()
